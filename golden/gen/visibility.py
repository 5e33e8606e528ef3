"""Does a case show what it is meant to pin? The generator runs the case a second time with one thing changed (a
deviation toggled, the padding mask dropped) and requires some expected tensor to change: a case whose numbers do
not move with the deviation cannot tell a faithful implementation from one that ignores it.
"""
import numpy as np

# A real change, not rounding: well above the reassociation noise of two evaluation orders.
MIN_CHANGE = 1e-9


def changed(expected, other):
    """Names of the tensors (present in both) whose values differ by more than MIN_CHANGE·max(1, |ref|)."""
    names = []
    for name in sorted(set(expected) & set(other)):
        a = np.asarray(expected[name], dtype=np.float64)
        b = np.asarray(other[name], dtype=np.float64)
        if a.shape != b.shape or np.any(np.abs(a - b) > MIN_CHANGE * np.maximum(1.0, np.abs(a))):
            names.append(name)
    return names
