#!/usr/bin/env python3
"""Cost model of Kolo's allreduce over hosts joined by links, checked against bench/scale.sh.

    scale_model.py OUT_DIR [--forecast-gbps G] [--forecast-delay-us D] [--forecast-per-host L]
                           [--forecast-local-gbps S]

OUT_DIR is what bench/scale.sh wrote (link.json, bench.jsonl, train.jsonl). Prints:
 1. the link as measured (single-stream payload rate, 1-byte round trip) and the fitted terms;
 2. every measured configuration and size (median over rounds): time, bus bandwidth, the share of
    the shaped link rate, the unshaped control's time (its ratio to the shaped time says whether
    the row is bound by the link or by this machine's CPUs), the model's prediction and error;
 3. the main job's samples/s per rank, if measured;
 4. the forecast for 64..1024 ranks (hosts of 8), twice: on the measured link and fitted alpha,
    and on assumed 10 Gbit/s links of 50 us delay (alpha = that + the fitted software overhead):
    each algorithm's predicted time, the cheapest, and how far Kolo's default rule is from it.

The model (as NCCL's tuning model): every algorithm step costs alpha + bytes / beta, where the
bytes are those that cross the busiest host link in that step and beta is that link's payload
rate; steps within a host cost alpha_local + bytes / beta_local. One difference on the testbed: its
links are token buckets (tc tbf), not wires. A bucket delays bytes only until tokens are there,
and tokens accrue at beta while anything else runs: the steps' latencies and the steps within a
host, of this call and of the previous one (kolo-bench calls back to back). So behind a bucket
an operation whose link steps fit the 256 KiB burst costs max(its latencies and local steps,
its link bytes / beta); a link step past the burst (a drained bucket) costs alpha + bytes / beta
in turn. The forecast uses the wire's alpha + bytes / beta for every step. The two differ only
where the link's bytes / beta is near the rest of the operation's time.
- Ring (flat, P = H x L ranks, ranks numbered host by host): 2(P-1) steps of n/P bytes; each
  host link carries one hop of the ring: 2(P-1) (alpha + n / (P beta)).
- Recursive doubling (P a power of two; Kolo's choice up to KOLO_RING_THRESHOLD = 64 KiB):
  log2 P steps exchanging all n bytes; in a step whose partner is on another host all L ranks
  of the host cross the link at once (L n bytes); partners on the same host cost a local step.
- Hierarchical (KOLO_HIERARCHICAL_ALLREDUCE=1, hosts of L ranks): a reduce-scatter within the
  host, an allreduce of each shard across the H hosts (L of them at once, sharing the link, each
  by the flat rule: a ring of n/L bytes, or recursive doubling up to the threshold), an
  allgather within the host. Local phases: (L-1) steps of n/L bytes each.
Fitted from the measurements (and printed): alpha = one-way delay (half the measured 1-byte
round trip) + a software overhead per step, and alpha_local (a step within a host), least
squares of the relative error over the 4 KiB flat rows (latency-bound; 1 to 3 steps across hosts
and 0 or 1 within); beta_local from the hierarchical 2 x 2 row at 16 MiB (the only local
bandwidth term). beta is not fitted: it is the measured single stream. Every other row is a
check. A row whose unshaped control takes at least CPU_BOUND of its shaped time is marked "CPU":
this machine's cores, not the link, set its time; the goal (within 20%) is judged on the others.
"""
import argparse
import json
import math
import os
import statistics
import sys

RING_THRESHOLD = 64 * 1024  # KOLO_RING_THRESHOLD's default: recursive doubling up to this size
FIT_ALPHA_SIZE = 4 * 1024
FIT_LOCAL = (2, 2, 1, 16 * 1024 * 1024)  # hosts, per host, hierarchical, size
CPU_BOUND = 0.7  # unshaped / shaped time from which a row counts as bound by the CPUs


BURST = 256 * 1024  # scale.sh's tbf burst


class Link:
    """alpha (s per step), beta (payload bytes/s); bucket: the testbed's tbf, else a wire."""

    def __init__(self, alpha, beta, bucket):
        self.alpha, self.beta, self.bucket = alpha, beta, bucket


class Cost:
    """One operation's time, step by step (module docstring): on a wire every step adds its
    alpha + bytes / beta; behind a token bucket a link step within the burst adds its alpha to
    the operation's serial time and its transfer to the link's, and the operation takes the
    larger of the two."""

    def __init__(self):
        self.serial = 0.0  # latencies, local steps and link steps past the burst, in turn
        self.buffered = 0.0  # link transfers within the burst, overlapping the rest

    def step(self, link, nbytes):
        if link.bucket and nbytes <= BURST:
            self.serial += link.alpha
            self.buffered += nbytes / link.beta
        else:
            self.serial += link.alpha + nbytes / link.beta
        return self

    def total(self):
        return max(self.serial, self.buffered)


def ring(p, n, link, cost):
    for _ in range(2 * (p - 1) if p > 1 else 0):
        cost.step(link, n / p)
    return cost


def recursive_doubling(p, per_host, n, link, local, cost):
    """link, local: Link of a step across hosts and within one."""
    for k in range(int(math.log2(p))):
        if (1 << k) < per_host:
            cost.step(local, n)
        else:
            cost.step(link, per_host * n)
    return cost


def flat(hosts, per_host, n, link, local):
    p = hosts * per_host
    if n <= RING_THRESHOLD and p & (p - 1) == 0:
        return recursive_doubling(p, per_host, n, link, local, Cost()).total()
    return ring(p, n, link, Cost()).total()


def hierarchical(hosts, per_host, n, link, local, cross=None):
    """cross: 'ring', 'rd' or None (Kolo's rule by shard size)."""
    shard = n / per_host
    cost = Cost()
    for _ in range(2 * (per_host - 1)):  # reduce-scatter and allgather within the host
        cost.step(local, shard)
    use_rd = cross == "rd" or (cross is None and shard <= RING_THRESHOLD and hosts & (hosts - 1) == 0)
    if use_rd:
        recursive_doubling(hosts, 1, shard * per_host, link, local, cost)
    else:
        ring(hosts, n, link, cost)  # L rings of n/L share the link: n/(H beta) a step
    return cost.total()


def predict(row, link, local):
    if row["hier"] and row["per_host"] > 1:
        return hierarchical(row["hosts"], row["per_host"], row["size"], link, local)
    return flat(row["hosts"], row["per_host"], row["size"], link, local)


def load(out):
    links = [json.loads(line) for line in open(os.path.join(out, "link.json")) if line.strip()]
    rows = {}
    path = os.path.join(out, "bench.jsonl")
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            key = (r["hosts"], r["per_host"], r["hier"], r["shaping"], r["size"])
            rows.setdefault(key, []).append(r["time_us"] * 1e-6)
    train = []
    path = os.path.join(out, "train.jsonl")
    if os.path.exists(path):
        train = [json.loads(line) for line in open(path) if line.strip()]
    return links, rows, train


def search(f, lo, hi):
    """The x in [lo, hi] (log grid of 2000 points) that minimises f(x)."""
    xs = [lo * (hi / lo) ** (i / 1999) for i in range(2000)]
    return min(xs, key=f)


def fit(links, rows, shaped):
    link_meas = next(l for l in links if l["shaping"] == shaped)
    beta = statistics.median(link_meas["stream_gbps"]) * 1e9 / 8
    delay = link_meas["rtt_us"] * 1e-6 / 2
    bucket = shaped != "none"
    med = {k: statistics.median(v) for k, v in rows.items() if k[3] == shaped}

    def rel_error(key, alpha, alpha_local, beta_local):
        h, l, hier, _, n = key
        row = {"hosts": h, "per_host": l, "hier": hier, "size": n}
        m = predict(row, Link(alpha, beta, bucket), Link(alpha_local, beta_local, False))
        return (m - med[key]) / med[key]

    # alpha, alpha_local: least squares of the relative error over the 4 KiB flat rows
    # (latency-bound), by coordinate descent (each a 1-D search; it settles in a few rounds).
    keys = [k for k in med if k[4] == FIT_ALPHA_SIZE and not k[2]]
    alpha = alpha_local = delay
    for _ in range(6 if keys else 0):
        alpha = search(lambda a: sum(rel_error(k, a, alpha_local, 4e9) ** 2 for k in keys),
                       1e-6, 1e-2)
        if any(k[1] > 1 for k in keys):
            alpha_local = search(lambda a: sum(rel_error(k, alpha, a, 4e9) ** 2 for k in keys),
                                 1e-6, 1e-2)
    # beta_local: the one hierarchical row of FIT_LOCAL.
    key = FIT_LOCAL[:3] + (shaped, FIT_LOCAL[3])
    beta_local = 4e9
    if key in med:
        beta_local = search(lambda b: abs(rel_error(key, alpha, alpha_local, b)), 1e8, 1e11)
    return {"beta": beta, "delay": delay, "alpha": alpha, "alpha_local": alpha_local,
            "beta_local": beta_local,
            "stream": link_meas, "bucket": bucket}


def size_text(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def summary(label, errors):
    if errors:
        print(f"Model error, {label} ({len(errors)} rows): median {statistics.median(errors):.1f}%, "
              f"max {max(errors):.1f}%, within 20%: {sum(e <= 20 for e in errors)}/{len(errors)}")


def print_table(rows, model, shaped, nominal_bps):
    link = Link(model["alpha"], model["beta"], model["bucket"])
    local = Link(model["alpha_local"], model["beta_local"], False)
    print("\n| hosts x ranks | algorithm | size | time (ms) | busbw (Gbit/s) | % of link rate | "
          "unshaped (ms) | unshaped / shaped | bound | model (ms) | error |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    checked, link_bound = [], []
    for h, l, hier, s, n in sorted(k for k in rows if k[3] == shaped):
        t = statistics.median(rows[(h, l, hier, s, n)])
        p = h * l
        busbw = n / t * 2 * (p - 1) / p * 8 / 1e9
        m = predict({"hosts": h, "per_host": l, "hier": hier, "size": n}, link, local)
        err = (m - t) / t * 100
        none = rows.get((h, l, hier, "none", n))
        u = statistics.median(none) if none else None
        bound = "" if u is None else ("CPU" if u / t >= CPU_BOUND else "link")
        fitted = (n == FIT_ALPHA_SIZE and not hier) or (h, l, hier, n) == FIT_LOCAL
        if not fitted:
            checked.append(abs(err))
            if bound == "link":
                link_bound.append(abs(err))
        algo = "hier" if hier else ("rd" if n <= RING_THRESHOLD and p & (p - 1) == 0 else "ring")
        share = f"{busbw * 1e9 / nominal_bps * 100:.0f}%" if nominal_bps and not hier else ""
        control = f"{u * 1e3:.3f} | {u / t:.2f}" if u else " | "
        print(f"| {h} x {l} | {algo} | {size_text(n)} | {t * 1e3:.3f} | {busbw:.3f} | {share} | "
              f"{control} | {bound} | {m * 1e3:.3f} | {err:+.1f}%{' (fit)' if fitted else ''} |")
    print()
    summary("all rows not used to fit", checked)
    summary("link-bound rows not used to fit", link_bound)


def print_train(train):
    if not train:
        return
    by = {}
    for r in train:
        by.setdefault((r["ranks"], r["place"]), []).append(r["samples_per_s"])
    base = statistics.median(by.get((1, "one"), [float("nan")]))
    print("\n| ranks | placement | samples/s (global, median) | per rank | per rank / 1 rank | "
          "hosts / one host (same ranks) | runs |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for (ranks, place) in sorted(by):
        v = by[(ranks, place)]
        med = statistics.median(v)
        same = by.get((ranks, "one"))
        vs_one = f"{med / statistics.median(same):.2f}" if place == "hosts" and same else ""
        where = "1 namespace" if place == "one" else f"{ranks} hosts, 1 each"
        print(f"| {ranks} | {where} | {med:.0f} | {med / ranks:.0f} | {med / ranks / base:.2f} | "
              f"{vs_one} | {', '.join(str(x) for x in v)} |")


PAYLOAD = 1448 / 1514  # TCP payload per Ethernet frame at MTU 1500 (timestamps on)


def forecast_table(title, link, local, per_host):
    print(f"\nForecast, {title}: hosts of {per_host} ranks, link payload "
          f"{link.beta * 8 / 1e9:.3f} Gbit/s, alpha {link.alpha * 1e6:.1f} us per step, within a "
          f"host {local.beta * 8 / 1e9:.0f} Gbit/s; a wire (alpha + bytes / beta a step)")
    print("\n| ranks | size | ring (ms) | rec. doubling (ms) | hier, cross ring (ms) | "
          "hier, cross rec. doubling (ms) | cheapest | Kolo's default (x cheapest) |")
    print("|---:|---:|---:|---:|---:|---:|---|---|")
    for p in (64, 128, 256, 512, 1024):
        h = p // per_host
        for n in (4 << 10, 256 << 10, 4 << 20, 64 << 20):
            cand = {"ring": ring(p, n, link, Cost()).total(),
                    "rec. doubling": recursive_doubling(p, per_host, n, link, local,
                                                        Cost()).total(),
                    "hier + ring": hierarchical(h, per_host, n, link, local, "ring"),
                    "hier + rec. doubling": hierarchical(h, per_host, n, link, local, "rd")}
            best = min(cand, key=cand.get)
            default = "rec. doubling" if n <= RING_THRESHOLD else "ring"
            print(f"| {p} | {size_text(n)} | " +
                  " | ".join(f"{cand[k] * 1e3:.3f}" for k in cand) +
                  f" | {best} | {default} ({cand[default] / cand[best]:.1f}x) |")


def print_forecast(args, model):
    software = max(model["alpha"] - model["delay"], 0.0)
    local = Link(model["alpha_local"], args.forecast_local_gbps * 1e9 / 8, False)
    forecast_table("the measured link", Link(model["alpha"], model["beta"], False), local,
                   args.forecast_per_host)
    alpha = args.forecast_delay_us * 1e-6 + software
    link = Link(alpha, args.forecast_gbps * PAYLOAD * 1e9 / 8, False)
    forecast_table(f"assumed {args.forecast_gbps:g} Gbit/s links of {args.forecast_delay_us:g} us "
                   f"delay (+ the measured {software * 1e6:.1f} us software overhead)", link,
                   local, args.forecast_per_host)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--forecast-gbps", type=float, default=10.0,
                    help="line rate of the second forecast's links (default 10 Gbit/s)")
    ap.add_argument("--forecast-delay-us", type=float, default=50.0,
                    help="one-way delay of the second forecast's links (default 50 us)")
    ap.add_argument("--forecast-per-host", type=int, default=8)
    ap.add_argument("--forecast-local-gbps", type=float, default=400.0,
                    help="bandwidth within a host for the forecast (default 400 Gbit/s, 50 GB/s)")
    args = ap.parse_args()
    links, rows, train = load(args.out)
    shaped = next((l["shaping"] for l in links if l["shaping"] != "none"), "none")
    model = fit(links, rows, shaped)
    s = model["stream"]
    nominal = None
    if shaped.endswith("gbit"):
        nominal = float(shaped[:-4]) * 1e9
    elif shaped.endswith("mbit"):
        nominal = float(shaped[:-4]) * 1e6
    print(f"Link {shaped}: single stream {', '.join(f'{g:.3f}' for g in s['stream_gbps'])} Gbit/s "
          f"(beta = median, payload), 1-byte round trip {s['rtt_us']:.1f} us")
    print(f"Fitted: alpha = {model['alpha'] * 1e6:.1f} us per step (one-way delay "
          f"{model['delay'] * 1e6:.1f} us + software {(model['alpha'] - model['delay']) * 1e6:.1f} us; "
          f"from the {size_text(FIT_ALPHA_SIZE)} flat rows), alpha_local = "
          f"{model['alpha_local'] * 1e6:.1f} us, beta_local = "
          f"{model['beta_local'] * 8 / 1e9:.2f} Gbit/s (from {FIT_LOCAL[0]} x {FIT_LOCAL[1]} "
          f"hierarchical at {size_text(FIT_LOCAL[3])})")
    if rows:
        print_table(rows, model, shaped, nominal)
    print_train(train)
    print_forecast(args, model)


if __name__ == "__main__":
    sys.exit(main())
