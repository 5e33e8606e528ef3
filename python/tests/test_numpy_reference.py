"""An independent numpy MoE layer, written here from the formulas (docs/layer.md), checked against the oracle: softmax
post top-k routing, SwiGLU experts, weighted combine, no capacity; its own manual backward, itself checked by central
finite differences of its own forward.

Fails when the oracle (or the binding's tensor mapping) computes another function than the formulas: another top-k
tie rule, weights normalised differently, [up; gate] instead of [gate; up], probabilities applied elsewhere, or a
gradient that is not the derivative of y."""
import numpy as np

import moe_oracle

CONFIG = {"hidden": 6, "num_experts": 5, "topk": 2, "ffn_hidden": 4, "score_function": "softmax",
          "topk_scaling_factor": 1.5}


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def silu(z):
    return z * sigmoid(z)


def silu_grad(z):
    s = sigmoid(z)
    return s * (1.0 + z * (1.0 - s))


def forward(p, x, k, alpha):
    """y_t = Σ_{e ∈ I_t} g_{t,e} · W2_e (silu(W_gate,e x_t) ⊙ W_up,e x_t), I_t = top-k logits (lower index wins
    ties), g_t = α · softmax over the selected logits. Returns y and what the backward needs."""
    logits = x @ p["router_weight"].T                                   # [T, E]
    selected = np.argsort(-logits, axis=1, kind="stable")[:, :k]         # [T, k]
    chosen = np.take_along_axis(logits, selected, axis=1)
    s = np.exp(chosen - chosen.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    g = alpha * s                                                        # [T, k]
    d = p["expert_fc1"].shape[1] // 2
    y = np.zeros_like(x)
    cache = []
    for t in range(x.shape[0]):
        for j, e in enumerate(selected[t]):
            a = p["expert_fc1"][e] @ x[t]                                # [2d] = [gate; up]
            act = silu(a[:d]) * a[d:]
            out = p["expert_fc2"][e] @ act                               # [h]
            y[t] += g[t, j] * out
            cache.append((t, j, e, a, act, out))
    return y, (selected, s, g, cache)


def backward(p, x, grad_y, alpha, saved):
    selected, s, g, cache = saved
    d = p["expert_fc1"].shape[1] // 2
    grads = {"x": np.zeros_like(x), "router_weight": np.zeros_like(p["router_weight"]),
             "expert_fc1": np.zeros_like(p["expert_fc1"]), "expert_fc2": np.zeros_like(p["expert_fc2"])}
    grad_g = np.zeros_like(g)
    for t, j, e, a, act, out in cache:
        grad_g[t, j] = grad_y[t] @ out
        grad_out = g[t, j] * grad_y[t]
        grads["expert_fc2"][e] += np.outer(grad_out, act)
        grad_act = p["expert_fc2"][e].T @ grad_out
        grad_a = np.concatenate([grad_act * a[d:] * silu_grad(a[:d]), grad_act * silu(a[:d])])
        grads["expert_fc1"][e] += np.outer(grad_a, x[t])
        grads["x"][t] += p["expert_fc1"][e].T @ grad_a
    # g = α·softmax(l_I): dl_I = α·s ⊙ (dg − Σ s·dg); unselected logits get nothing.
    grad_s = alpha * grad_g
    grad_chosen = s * (grad_s - np.sum(s * grad_s, axis=1, keepdims=True))
    grad_logits = np.zeros((x.shape[0], p["router_weight"].shape[0]))
    np.put_along_axis(grad_logits, selected, grad_chosen, axis=1)
    grads["router_weight"] += grad_logits.T @ x
    grads["x"] += grad_logits @ p["router_weight"]
    return grads


def random_layer(rng, T):
    h, E, d = CONFIG["hidden"], CONFIG["num_experts"], CONFIG["ffn_hidden"]
    p = {"router_weight": rng.normal(size=(E, h)), "expert_fc1": rng.normal(size=(E, 2 * d, h)) / np.sqrt(h),
         "expert_fc2": rng.normal(size=(E, h, d)) / np.sqrt(d)}
    return p, rng.normal(size=(T, h)), rng.normal(size=(T, h))


def test_numpy_backward_matches_its_own_finite_differences():
    rng = np.random.default_rng(11)
    p, x, grad_y = random_layer(rng, T=5)
    k, alpha = CONFIG["topk"], CONFIG["topk_scaling_factor"]
    y, saved = forward(p, x, k, alpha)
    grads = backward(p, x, grad_y, alpha, saved)
    tensors = dict(p, x=x)
    h = 1e-6
    for name, value in tensors.items():
        flat = value.reshape(-1)
        for i in range(0, flat.size, max(1, flat.size // 15)):
            saved_value = flat[i]
            flat[i] = saved_value + h
            plus = np.sum(grad_y * forward(p, x, k, alpha)[0])
            flat[i] = saved_value - h
            minus = np.sum(grad_y * forward(p, x, k, alpha)[0])
            flat[i] = saved_value
            numeric = (plus - minus) / (2 * h)
            assert abs(numeric - grads[name].reshape(-1)[i]) < 1e-6 * (1 + abs(numeric)), (name, i)


def test_oracle_matches_the_numpy_layer():
    rng = np.random.default_rng(2024)
    p, x, grad_y = random_layer(rng, T=12)
    k, alpha = CONFIG["topk"], CONFIG["topk_scaling_factor"]
    y, saved = forward(p, x, k, alpha)
    expected = backward(p, x, grad_y, alpha, saved)

    out = moe_oracle.layer_forward(CONFIG, p, x, batch=3)
    np.testing.assert_allclose(out["y"], y, **moe_oracle.tolerance("golden_case"))
    selected, s, g, _ = saved
    np.testing.assert_array_equal(np.sort(out["selected"], axis=1), np.sort(selected, axis=1))
    probs = np.zeros((x.shape[0], CONFIG["num_experts"]))
    np.put_along_axis(probs, selected, g, axis=1)
    np.testing.assert_allclose(out["probs"], probs, **moe_oracle.tolerance("golden_case"))
    np.testing.assert_array_equal(out["routing_map"], probs > 0)

    grads = moe_oracle.layer_backward(CONFIG, p, x, grad_y, batch=3)
    assert set(grads) == set(expected)
    for name in expected:
        np.testing.assert_allclose(grads[name], expected[name], **moe_oracle.tolerance("golden_case"), err_msg=name)


def test_a_tie_at_the_top_k_boundary_goes_to_the_lower_index():
    # Logits [3, 2, 1, 2, 0]·c for every token (x = c·e_0, exact in binary): expert 0 first, then experts 1 and 3 tie
    # for the second place; the lower index wins (docs/numerics.md), so I_t = [0, 1] and expert 3 is not used.
    rng = np.random.default_rng(5)
    p, _, grad_y = random_layer(rng, T=4)
    p["router_weight"][:, 0] = [3.0, 2.0, 1.0, 2.0, 0.0]
    x = np.zeros((4, CONFIG["hidden"]))
    x[:, 0] = [1.0, 2.0, 0.5, 4.0]
    out = moe_oracle.layer_forward(CONFIG, p, x)
    assert out["selected"].tolist() == [[0, 1]] * 4
    assert out["tokens_per_expert"].tolist() == [4, 4, 0, 0, 0]
    ours, _ = forward(p, x, CONFIG["topk"], CONFIG["topk_scaling_factor"])
    np.testing.assert_allclose(out["y"], ours, **moe_oracle.tolerance("golden_case"))
