// The small floating-point formats of low-precision MoE training, bit-exact on the CPU (issue 20's first part):
//
//   format  bits  exponent  mantissa  bias  largest finite  specials                        where
//   e4m3      8      4         3        7    448 = 1.75·2^8   NaN = S.1111.111, no infinity   FP8 (OCP "E4M3FN"), DeepSeek-V3's FP8
//   e5m2      8      5         2       15  57344 = 1.75·2^15  ±inf = S.11111.00, NaN the rest  FP8 (OCP), IEEE-like
//   e2m1      4      2         1        1    6 = 1.5·2^2      none                            FP4 elements of MXFP4 and NVFP4
//   e8m0      8      8         0      127    2^127            NaN = 0xFF; no sign, no zero     the MX block scale, 2^(code − 127)
//
// A code of e4m3/e5m2/e2m1 is sign | exponent field | mantissa field; exponent field 0 holds the subnormals
// (0.m · 2^(1 − bias)). Encoding rounds to nearest, ties to even, exactly (in double, for any double input), and
// saturates: a finite value beyond the largest finite, and ±inf, become ± the largest finite (NVIDIA's
// cvt.rn.satfinite, the mode DeepSeek's FP8 recipe and the MX specification's FP4 conversion use). NaN encodes
// to the format's NaN (e2m1 has none: encoding NaN throws). Zero keeps its sign.
#pragma once

#include <cstdint>
#include <string_view>

namespace moe {

enum class Minifloat { e4m3, e5m2, e2m1 };

std::string_view to_string(Minifloat format);
int code_count(Minifloat format);        // 256, 256, 16
double largest_finite(Minifloat format);  // 448, 57344, 6

// The code of x, rounded to nearest even and saturated as above.
std::uint8_t encode(Minifloat format, double x);
// The exact value of a code (NaN and ±inf where the format has them). Throws std::invalid_argument for a code
// beyond the format's width (≥ 16 for e2m1).
double decode(Minifloat format, std::uint8_t code);
// x rounded to the format: decode(encode(x)).
double round_to(Minifloat format, double x);

// E8M0, the MX shared scale: the code of 2^e, e clamped to [−127, 127] (the finite codes 0 … 254).
std::uint8_t e8m0_of_exponent(int e);
// 2^(code − 127); NaN for 0xFF.
double decode_e8m0(std::uint8_t code);

}  // namespace moe
