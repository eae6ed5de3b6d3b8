#!/usr/bin/env python3
"""How fast an elastic job recovers from a killed rank (issue 27's goals), on real processes.

Runs tests/elastic's elastic_train_worker through kolorun --min-np, SIGKILLs one rank mid-epoch
(worker 2 at step 12 of generation 0) and reads the timestamps the ranks print:
  survivors: from the kill to the last survivor's first step in the new world (detection,
             re-form, sync of the state, on every survivor), without restarting any process;
  respawn:   with --respawn, from the kill to the replacement's first step.
Prints the median and the worst of ROUNDS kills per backend and mode, as a Markdown table.

  bench/elastic_recovery.py [--build build] [--rounds 10] [--np 4] [--elements 1071636]

--elements defaults to the Fashion-MNIST MLP's parameters plus their momentum (what the main
job's State holds), so the sync moves as many bytes as the main job's would.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

DIES = re.compile(r"worker (\d+) dies \(kill\) at step \d+ at (\d+)")
STEP = re.compile(r"^\[(\d+)\] step \d+ generation (\d+) size \d+ at (\d+)$", re.M)


def one_kill(args, backend, respawn):
    cmd = [os.path.join(args.build, "bin", "kolorun"), "-np", str(args.np), "--min-np", "2"]
    if respawn:
        cmd.append("--respawn")
    cmd += [os.path.join(args.build, "bin", "elastic_train_worker"), "--steps", "40",
            "--commit-every", "5", "--step-ms", "20", "--elements", str(args.elements),
            "--die", "2:12:0"]
    env = dict(os.environ, KOLO_CPU_OPERATIONS=backend)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"{backend}: kolorun exited {out.returncode}:\n{text}")
    killed = int(DIES.search(text).group(2))
    firsts = {}  # worker -> its first step after the kill
    for worker, generation, at in STEP.findall(text):
        if int(generation) > 0 and int(at) > killed:
            firsts.setdefault(int(worker), int(at))
    survivors = [w for w in range(args.np) if w != 2]
    survived = max(firsts[w] for w in survivors) - killed
    replaced = firsts[args.np] - killed if respawn else None
    return survived / 1e6, (replaced / 1e6 if replaced is not None else None)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--elements", type=int, default=1071636)
    args = p.parse_args()
    print(f"{args.np} ranks, worker 2 SIGKILLed at step 12, {args.elements} float32 in the "
          f"State, {args.rounds} kills each\n")
    print("| backend | mode | survivors' first step, median ms | worst ms "
          "| replacement's first step, median ms | worst ms |")
    print("|---|---|---:|---:|---:|---:|")
    for backend in ("tcp", "shm"):
        for respawn in (False, True):
            runs = [one_kill(args, backend, respawn) for _ in range(args.rounds)]
            s = [r[0] for r in runs]
            row = f"| {backend} | {'--respawn' if respawn else 'shrink'} " \
                  f"| {statistics.median(s):.0f} | {max(s):.0f} "
            if respawn:
                rep = [r[1] for r in runs]
                row += f"| {statistics.median(rep):.0f} | {max(rep):.0f} |"
            else:
                row += "| | |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
