"""fp8 e4m3 bytes <-> fp32 by bit arithmetic, for the two formats KV caches use.

``e4m3fn`` (OCP; MI355X, NVIDIA): bias 7, max 448, NaN 0x7F/0xFF, a negative zero.
``e4m3fnuz`` (MI300X): bias 8, max 240, NaN 0x80, no negative zero.

Compiled kernels decode with the hardware conversion (``tensor.to``); these exist because the
Triton interpreter's own fp8 casts are wrong at the edges (NaN codes decode as +-480, values that
round up into the next binade lose a factor of 2), and because a KV write must round exactly as
``torch`` does on every platform.  Encoding is round-to-nearest-even with saturation, i.e.
``x.clamp(-max, max).to(fmt)``; NaN stays NaN (with its sign, in e4m3fn).
"""

import triton
import triton.language as tl


@triton.jit
def decode_e4m3(byte, FNUZ: tl.constexpr):
    """uint8 codes -> fp32 values.

    The 7 magnitude bits shifted into a float16 line up with its exponent and mantissa, and
    float16's subnormals land exactly on e4m3's; only the exponent bias differs (15 vs 7 or 8),
    which one exact multiplication by a power of two repays.
    """
    code = byte.to(tl.int32)
    bits = ((code & 0x80) << 8) | ((code & 0x7F) << 7)
    half = bits.to(tl.int16).to(tl.float16, bitcast=True)
    value = half.to(tl.float32) * (128.0 if FNUZ else 256.0)
    nan = (code == 0x80) if FNUZ else ((code & 0x7F) == 0x7F)
    return tl.where(nan, float("nan"), value)


@triton.jit
def encode_e4m3(x, FNUZ: tl.constexpr):
    """fp32 values -> uint8 codes, round to nearest even, saturated to the largest finite value."""
    BIAS: tl.constexpr = 8 if FNUZ else 7
    MAX: tl.constexpr = 240.0 if FNUZ else 448.0
    MIN_NORMAL: tl.constexpr = 2.0 ** (1 - BIAS)
    SUBNORMAL_UNITS: tl.constexpr = 2.0 ** (BIAS + 2)   # 1 / the smallest subnormal
    a = tl.minimum(tl.abs(x), MAX)
    bits = a.to(tl.int32, bitcast=True)
    # Normal range: drop 20 of fp32's 23 mantissa bits, rounding half to even, then rebias.
    rounded = bits + 0x7FFFF + ((bits >> 20) & 1)
    normal = (rounded >> 20) - ((127 - BIAS) << 3)
    # Subnormal range: a count of the smallest subnormal; 2^23 forces fp32 to round to an integer
    # (nearest even), and 8 of them is the smallest normal, code 0x08: the two ranges meet.
    units = (a * SUBNORMAL_UNITS + 8388608.0) - 8388608.0
    code = tl.where(a < MIN_NORMAL, units.to(tl.int32), normal)
    negative = (x.to(tl.int32, bitcast=True) >> 31) != 0
    if FNUZ:
        code = tl.where(negative & (code != 0), code | 0x80, code)  # no negative zero
        code = tl.where(x != x, 0x80, code)
    else:
        code = tl.where(x != x, 0x7F, code)  # NaN keeps its sign, as torch converts it
        code = tl.where(negative, code | 0x80, code)
    return code.to(tl.uint8)
