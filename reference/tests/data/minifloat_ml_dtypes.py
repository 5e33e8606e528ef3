# Writes minifloat_ml_dtypes.txt: what ml_dtypes (an implementation no one here wrote) encodes for inputs that
# probe every code of e4m3 (float8_e4m3fn), e5m2 (float8_e5m2) and e2m1 (float4_e2m1fn): each finite value, each
# midpoint between neighbours (the ties), each midpoint ± one float32 ulp, and log-uniform random values; both signs.
#
# ml_dtypes converts a float64 through float32, so every input here is a float32 (then the two agree on rounding),
# and none is beyond the largest finite value: there ml_dtypes overflows to NaN or inf where reference/minifloat.hpp
# saturates, and that part is tested by hand. Run: python3 minifloat_ml_dtypes.py > minifloat_ml_dtypes.txt
import ml_dtypes
import numpy as np

FORMATS = [("e4m3", ml_dtypes.float8_e4m3fn, 256), ("e5m2", ml_dtypes.float8_e5m2, 256),
           ("e2m1", ml_dtypes.float4_e2m1fn, 16)]


def values(dtype, codes):
    raw = np.arange(codes, dtype=np.uint8)
    v = raw.view(dtype).astype(np.float64) if codes == 256 else np.array(
        [np.array(c, dtype=np.uint8).view(dtype).astype(np.float64) for c in range(codes)])
    return v


def main():
    rng = np.random.default_rng(20261201)
    print(f"# ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}: format input(hex float32) code(hex)")
    for name, dtype, codes in FORMATS:
        v = values(dtype, codes)
        finite = np.unique(v[np.isfinite(v) & (v >= 0)])
        largest = finite.max()
        inputs = list(finite)
        mids = (finite[1:] + finite[:-1]) / 2
        for m in mids:
            m32 = np.float32(m)
            assert float(m32) == m, "a midpoint is not a float32"
            inputs += [m, float(np.nextafter(m32, np.float32(0))), float(np.nextafter(m32, np.float32(np.inf)))]
        smallest = finite[finite > 0].min()
        inputs += list(np.exp(rng.uniform(np.log(smallest / 4), np.log(largest), 200)))
        inputs = sorted({float(np.float32(x)) for x in inputs if float(np.float32(x)) <= largest})
        for x in inputs:
            for s in (x, -x):
                code = np.array([s], dtype=np.float32).astype(dtype).view(np.uint8)[0]
                print(f"{name} {float(np.float32(s)).hex()} {int(code):#04x}")


if __name__ == "__main__":
    main()
