#!/usr/bin/env python3
"""Checks exact_worker's results (KOLO_REDUCTION=exact) against the correctly rounded sums.

    exact_check.py DIR [DIR2 ...]

DIR holds rank<R>.txt of one job (exact_worker.cc says what they hold). For every element of
every tensor, the reference is computed here with Python integers: every input as an exact
integer multiple of 2^-1074, their exact sum, divided by the rank count for an average, rounded
once to the tensor's format to nearest, ties to even (Inf past the largest value; NaN for any NaN
or +Inf beside -Inf; -0 only when every input was -0). Every rank's result must equal it, bit for
bit. With several DIRs (jobs over the same multisets, e.g. --rotate), their results must also be
identical. Prints one line per job and exits 1 on the first mismatch, naming tensor and element.
"""
import glob
import os
import sys

# width, significand bits (with the hidden one), exponent bits
FORMATS = {"float16": (16, 11, 5), "bfloat16": (16, 8, 8), "float32": (32, 24, 8),
           "float64": (64, 53, 11)}
U = 1074  # every value is an integer multiple of 2^-U


def decode(fmt, b):
    """(kind, integer value in units of 2^-U); kind is 'nan', '+inf', '-inf', '-0' or 'num'."""
    w, p, eb = FORMATS[fmt]
    bias = (1 << (eb - 1)) - 1
    neg = b >> (w - 1) & 1
    e = b >> (p - 1) & ((1 << eb) - 1)
    f = b & ((1 << (p - 1)) - 1)
    if e == (1 << eb) - 1:
        return ("nan", 0) if f else ("-inf" if neg else "+inf", 0)
    if e == 0 and f == 0:
        return ("-0" if neg else "num", 0)
    m = (f | (1 << (p - 1))) if e else f
    shift = (max(e, 1) - bias - (p - 1)) + U
    v = m << shift
    return "num", -v if neg else v


def round_to(fmt, num, den):
    """Bits of num/den (num != 0, den > 0) rounded to nearest even in fmt."""
    w, p, eb = FORMATS[fmt]
    bias = (1 << (eb - 1)) - 1
    emin = 1 - bias - (p - 1)
    max_ulp = (1 << eb) - 2 - bias - (p - 1)
    sign = (1 << (w - 1)) if num < 0 else 0
    num = abs(num)
    den = den << U  # value = num / den exactly
    e = num.bit_length() - den.bit_length()  # 2^(e-1) < num/den < 2^(e+1)
    if (num < den << e) if e >= 0 else (num << -e < den):
        e -= 1  # now 2^e <= num/den < 2^(e+1)
    ulp = max(e - (p - 1), emin)
    if ulp >= 0:
        m, r = divmod(num, den << ulp)
        d = den << ulp
    else:
        m, r = divmod(num << -ulp, den)
        d = den
    if 2 * r > d or (2 * r == d and m & 1):
        m += 1
    if m == 1 << p:
        m >>= 1
        ulp += 1
    if ulp > max_ulp:
        return sign | (((1 << eb) - 1) << (p - 1))
    if m < 1 << (p - 1):
        return sign | m
    return sign | ((ulp - emin + 1) << (p - 1)) | (m - (1 << (p - 1)))


def reference(fmt, inputs, divisor):
    w, p, eb = FORMATS[fmt]
    kinds = [decode(fmt, b) for b in inputs]
    names = {k for k, _ in kinds}
    inf = ((1 << eb) - 1) << (p - 1)
    if "nan" in names or ("+inf" in names and "-inf" in names):
        return inf | (1 << (p - 2))
    if "+inf" in names:
        return inf
    if "-inf" in names:
        return inf | (1 << (w - 1))
    total = sum(v for _, v in kinds)
    if total == 0:
        return (1 << (w - 1)) if names == {"-0"} else 0
    return round_to(fmt, total, divisor)


def read_job(d):
    ranks = {}
    for path in glob.glob(os.path.join(d, "rank*.txt")):
        r = int(os.path.basename(path)[4:-4])
        tensors = {}
        with open(path) as f:
            lines = f.read().splitlines()
        for k in range(0, len(lines), 3):
            _, name, fmt, op, count, offset = lines[k].split()
            ins = [int(x, 16) for x in lines[k + 1].split()[1:]]
            outs = [int(x, 16) for x in lines[k + 2].split()[1:]]
            tensors[name] = (fmt, op, int(count), int(offset), ins, outs)
        ranks[r] = tensors
    return ranks


def check_job(d):
    ranks = read_job(d)
    p = len(ranks)
    assert p >= 1 and sorted(ranks) == list(range(p)), f"{d}: rank files {sorted(ranks)}"
    results = {}
    for name in ranks[0]:
        fmt, op = ranks[0][name][0], ranks[0][name][1]
        count = ranks[0][name][2]
        want = [reference(fmt, [ranks[r][name][4][i] for r in range(p)],
                          p if op == "average" else 1) for i in range(count)]
        full = [None] * count
        for r in range(p):
            _, _, _, offset, _, outs = ranks[r][name]
            for j, got in enumerate(outs):
                i = offset + j
                if got != want[i]:
                    print(f"{d}: {name} ({fmt} {op}) element {i} rank {r}: got {got:#x}, "
                          f"want {want[i]:#x}; inputs "
                          f"{[hex(ranks[q][name][4][i]) for q in range(p)]}")
                    sys.exit(1)
                full[i] = got
        results[name] = full
    print(f"{d}: {p} ranks, {len(results)} tensors, every element correctly rounded")
    return results


def main():
    jobs = [check_job(d) for d in sys.argv[1:]]
    for j in jobs[1:]:
        common = set(j) & set(jobs[0])  # only some jobs hold the "chunks" tensor
        if any(j[name] != jobs[0][name] for name in common):
            print("jobs over the same multisets gave different results")
            sys.exit(1)
    if len(jobs) > 1:
        print(f"{len(jobs)} jobs gave identical results")


if __name__ == "__main__":
    main()
