#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Records and reports the measurements of `make bench`.

  bench.py record RUNS bench.jsonl                                                  (host)
      RUNS has a line per fio run: BACKING TRANSPORT ROUND JOB RW BS QD NJ JIFFIES HZ
      FIO_JSON [COPIED MOVED] (the guest writes it, see scripts/bench-guest.sh; FIO_JSON
      relative to RUNS's folder; COPIED and MOVED, the data bytes nvme_rsrdma copied and moved
      during the run, or -); appends a JSON line per run to bench.jsonl and prints a summary
      line
  bench.py report bench.jsonl OUT.json                                             (host)

The report takes the median over rounds of each figure, per backing, transport and job,
prints one table (rsrdma through its pool, rsrdma from its registered area, C rdma, the ratios
of the first two to C, rsrdma as a share of the raw rxe bandwidth of the verb that moves the
data, CPU time per I/O, bytes copied per byte moved) and writes the same data as JSON. The
transports run each job back to back in every round, so a ratio is the median of the
per-round ratios of those pairs (the table also shows their range); without pairs it falls
back to the ratio of the medians.
"""
import json
import os
import sys


def record(args):
    runs, jsonl = args
    folder = os.path.dirname(runs)
    with open(runs) as f, open(jsonl, "a") as out:
        for line in f:
            if line.strip():
                rec = record_one(line.split(), folder)
                out.write(json.dumps(rec) + "\n")
                summary(rec)


def record_one(fields, folder):
    backing, transport, rnd, name, rw, bs, qd, nj, jiffies, hz, fio_json = fields[:11]
    copied, moved = (fields[11:13] + ["-", "-"])[:2]
    base = {"backing": backing, "transport": transport, "round": int(rnd), "job": name}
    try:
        with open(os.path.join(folder, fio_json)) as f:
            job = json.load(f)["jobs"][0]
    except Exception as e:  # fio failed: keep the record, marked
        return {**base, "error": "no fio result: %s" % e}
    d = job["write"] if "write" in rw else job["read"]
    ios = max(d["total_ios"], 1)
    pct = d.get("clat_ns", {}).get("percentile", {})
    runtime_ms = job.get("job_runtime") or d.get("runtime") or 0
    rec = {
        **base,
        "rw": rw, "bs": bs, "iodepth": int(qd), "numjobs": int(nj),
        "iops": d["iops"],
        "bw_mib_s": d["bw_bytes"] / 2**20,
        "ios": d["total_ios"],
        "lat_p50_us": pct.get("50.000000", 0) / 1000,
        "lat_p99_us": pct.get("99.000000", 0) / 1000,
        "errors": job.get("error", 0),
        # All CPU time of the guest (busy jiffies from /proc/stat) per I/O, softirq included.
        "cpu_us_per_io": int(jiffies) * 1e6 / int(hz) / ios,
        # fio's own threads only.
        "fio_cpu_us_per_io": (job["usr_cpu"] + job["sys_cpu"]) / 100 * runtime_ms * 1000 / ios,
    }
    if copied != "-" and moved != "-" and int(moved) > 0:
        # Counted over the whole run, fio's ramp included.
        rec["copied_per_byte"] = int(copied) / int(moved)
    return rec


def summary(r):
    if "iops" in r:
        print("bench: %(backing)s %(transport)s round %(round)s %(job)s: %(iops).0f IOPS, "
              "%(bw_mib_s).1f MiB/s, p50 %(lat_p50_us).0f us, %(cpu_us_per_io).0f us CPU/IO" % r)
    else:
        print("bench: %s" % r)


# Figures of the table: (job, metric, label, higher is better)
ROWS = [
    ("lat4k", "lat_p50_us", "4k randread QD1 p50 latency (us)", False),
    ("lat4k", "lat_p99_us", "4k randread QD1 p99 latency (us)", False),
    ("iops4k", "iops", "4k randread QD32 x jobs (IOPS)", True),
    ("randwrite4k", "iops", "4k randwrite QD32 (IOPS)", True),
    ("seqread128k", "bw_mib_s", "128k seq read QD8 (MiB/s)", True),
    ("seqwrite128k", "bw_mib_s", "128k seq write QD8 (MiB/s)", True),
    ("seqwrite4m", "bw_mib_s", "4M seq write QD4 (MiB/s)", True),
    ("seqread4m", "bw_mib_s", "4M seq read QD4 (MiB/s)", True),
    ("iops4k", "cpu_us_per_io", "4k randread QD32: CPU per I/O (us)", False),
    ("seqread4m", "cpu_us_per_io", "4M seq read: CPU per I/O (us)", False),
]


def report(args):
    import statistics  # only here: it takes a second to import in the TCG guest

    src, dst = args
    recs = [json.loads(line) for line in open(src) if line.strip()]
    info = next((r["info"] for r in recs if "info" in r), {})
    raw = [r for r in recs if "raw" in r]
    ceiling = max((r["bw_mib_s"] for r in raw), default=0)
    # The ceiling of each verb: NVMe read data moves by the target's RDMA WRITE, NVMe write
    # data by its RDMA READ, so each direction is held to the best its own verb did.
    verb_of = lambda r: r.get("verb") or ("write" if "write" in r["raw"] else "read")
    verb_ceiling = {v: max((r["bw_mib_s"] for r in raw if verb_of(r) == v), default=0)
                    for v in ("write", "read")}
    data = {}
    errors = [r for r in recs if r.get("error") or r.get("errors")]
    for r in recs:
        if "job" in r and "iops" in r:
            data.setdefault((r["backing"], r["transport"], r["job"]), []).append(r)

    def med(backing, transport, job, metric):
        vals = [r[metric] for r in data.get((backing, transport, job), []) if r.get(metric) is not None]
        return statistics.median(vals) if vals else None

    def paired(backing, job, metric, t="rsrdma"):
        """t/C of each round in which both ran the job."""
        by_round = {}
        for tr in (t, "rdma"):
            for r in data.get((backing, tr, job), []):
                if r.get(metric) is not None:
                    by_round.setdefault(r["round"], {})[tr] = r[metric]
        return [v[t] / v["rdma"] for _, v in sorted(by_round.items())
                if len(v) == 2 and v["rdma"]]

    out = {"info": info, "raw_rxe": raw, "raw_ceiling_mib_s": ceiling,
           "raw_ceiling_by_verb_mib_s": verb_ceiling, "figures": []}
    out["max_io_kib"] = [r["max_io"] for r in recs if "max_io" in r]
    clock = info.get("clock", "real")
    large = ""
    if info.get("seconds_large") is not None:
        large = " (%s s for blocks of 1 MiB or more)" % info["seconds_large"]
    print("nvme-rsrdma benchmark: kernel %s, %s vCPUs, accelerator %s, %s clock, idle loop %s, %s"
          " rounds of %s s per job%s" % (info.get("kernel"), info.get("vcpus"), info.get("accel"),
                                         clock, info.get("idle", "halt"), info.get("rounds"),
                                         info.get("seconds"), large))
    if clock == "icount":
        print("""\
clock: QEMU icount, one guest instruction per %d ns of guest time, the vCPUs taking turns:
  figures count the instructions a path costs, whatever the host's load; an idle vCPU
  costs nothing, two busy ones are no faster than one (and guest CPU time also counts
  a vCPU's wait for its turn: the CPU per I/O rows overstate work that keeps both busy)"""
              % 2 ** info.get("icount_shift", 1))
    print("fabric: rxe on a netdev of MTU %s (RoCE MTU %s), target and host in the same guest"
          % (info.get("netdev_mtu", "?"), info.get("roce_mtu", "?")))
    for r in raw:
        print("raw rxe RDMA %-5s %-13s %-7s %d QP: %6.1f MiB/s with 4 MiB messages"
              % (verb_of(r), r.get("tool", "perftest"), r["poll"], r.get("qps", 1), r["bw_mib_s"]))
    if raw:
        print("raw rxe ceilings: RDMA WRITE %.1f MiB/s (the verb that moves NVMe read data), RDMA"
              " READ" % verb_ceiling["write"])
        print("  %.1f MiB/s (NVMe write data): the best of each verb on the same rxe device, 2 or 4"
              " QPs;" % verb_ceiling["read"])
        print("  perftest busy-polls (a vCPU rxe then lacks) and has event mode for READ only;")
        print("  rsrdma-target --raw-bw sleeps on completion events for both; the kernel tool")
        print("  (rsrdma_rawbw) moves kernel memory and polls in softirq context, as the transports"
              " do")
    else:
        print("raw rxe ceilings: not measured (BENCH_RAW=0)")
    max_io = {}
    for r in recs:
        if "max_io" in r:
            m = r["max_io"]
            max_io[(m["backing"], m["transport"])] = m
    backings = [b for b in ("null", "mem", "own") if any(k[0] == b for k in data)]
    for backing in backings:
        print()
        print({"null": "namespace: nvmet-rdma, null_blk without memory backing",
               "mem": "namespace: nvmet-rdma, null_blk memory backed",
               "own": "namespace: rsrdma-target (tests/target), memory backed, MDTS 8 MiB"}[backing]
              + " (largest command: rsrdma %s KiB, C rdma %s KiB; I/O queues %s and %s)"
              % tuple(max_io.get((backing, t), {}).get(k, "?")
                      for k in ("kib", "io_queues") for t in ("rsrdma", "rdma")))
        print("%-38s %10s %10s %10s %7s %11s %7s %11s %9s %11s" % (
            "figure", "rsrdma", "area", "C rdma", "ratio", "per round", "area", "per round",
            "% raw verb", "copied/byte"))
        print("%-38s %10s %10s %10s %7s %11s %7s %11s %9s %11s" % (
            "", "(pool)", "(no copy)", "", "pool/C", "", "area/C", "", "(pool)", "pool area"))
        for job, metric, label, higher in ROWS:
            a = med(backing, "rsrdma", job, metric)
            z = med(backing, "area", job, metric)
            b = med(backing, "rdma", job, metric)
            if a is None and b is None and z is None:
                continue
            # Ratios to C as measured; for latency and CPU lower is better.
            pairs = paired(backing, job, metric)
            ratio = statistics.median(pairs) if pairs else (a / b if a is not None and b else None)
            zpairs = paired(backing, job, metric, "area")
            zratio = (statistics.median(zpairs) if zpairs
                      else (z / b if z is not None and b else None))
            share = None
            c = verb_ceiling["write" if "read" in job else "read"] or ceiling
            if metric == "bw_mib_s" and a is not None and c:
                share = 100 * a / c
            copy_a = med(backing, "rsrdma", job, "copied_per_byte")
            copy_z = med(backing, "area", job, "copied_per_byte")
            fmt = lambda v: "-" if v is None else ("%.1f" % v)
            rng = lambda p: "%.2f-%.2f" % (min(p), max(p)) if p else "-"
            cpb = lambda v: "-" if v is None else "%.2f" % v
            print("%-38s %10s %10s %10s %7s %11s %7s %11s %9s %11s" % (
                label, fmt(a), fmt(z), fmt(b), "-" if ratio is None else "%.2fx" % ratio,
                rng(pairs), "-" if zratio is None else "%.2fx" % zratio, rng(zpairs),
                "-" if share is None else "%.0f%%" % share,
                "%s %s" % (cpb(copy_a), cpb(copy_z))))
            out["figures"].append({"backing": backing, "figure": label, "job": job, "metric": metric,
                                   "rsrdma": a, "area": z, "c_rdma": b,
                                   "ratio_rsrdma_over_c": ratio, "round_ratios": pairs,
                                   "ratio_area_over_c": zratio, "area_round_ratios": zpairs,
                                   "copied_per_byte_pool": copy_a,
                                   "copied_per_byte_area": copy_z,
                                   "higher_is_better": higher, "pct_of_raw_rxe": share})
    # The goals of the benchmark (issue 5), checked against the table.
    figs = {(f["backing"], f["job"], f["metric"]): f for f in out["figures"]}

    def ratio(backing, job, metric):
        f = figs.get((backing, job, metric))
        return f and f["ratio_rsrdma_over_c"]

    goals = []
    for backing in ("null", "mem"):
        if (backing, "iops4k", "iops") in figs:
            goals.append(("%s: 4k randread QD32 IOPS >= 1.10x C" % backing,
                          ratio(backing, "iops4k", "iops"), lambda v: v >= 1.10))
            goals.append(("%s: 4k QD1 p50 latency <= 0.95x C" % backing,
                          ratio(backing, "lat4k", "lat_p50_us"), lambda v: v <= 0.95))
        for job in ("seqwrite4m", "seqread4m"):
            if (backing, job, "bw_mib_s") in figs:
                goals.append(("%s: %s >= 1.10x C" % (backing, job),
                              ratio(backing, job, "bw_mib_s"), lambda v: v >= 1.10))
                share = figs[(backing, job, "bw_mib_s")]["pct_of_raw_rxe"]
                goals.append(("%s: %s >= 85%% of raw rxe (its verb)" % (backing, job),
                              share and share / 100, lambda v: v >= 0.85))
    for job in ("seqwrite4m", "seqread4m"):
        if ("own", job, "bw_mib_s") in figs:
            goals.append(("own target: %s >= 1.25x C" % job, ratio("own", job, "bw_mib_s"),
                          lambda v: v >= 1.25))
    # The registered area (issue 42): on the instruction clock every row from the area at least
    # C's; on the real clock the 4 MiB stream against the 4 MiB target 1.25x C.
    for f in out["figures"]:
        if f["ratio_area_over_c"] is None or "CPU" in f["figure"]:
            continue
        if clock == "icount":
            goals.append(("area: %s %s >= C" % (f["backing"], f["figure"]),
                          f["ratio_area_over_c"] if f["higher_is_better"]
                          else 1 / f["ratio_area_over_c"], lambda v: v >= 1.0))
        elif f["backing"] == "own":
            goals.append(("area: own %s >= 1.25x C" % f["figure"], f["ratio_area_over_c"],
                          lambda v: v >= 1.25))
    # Device memory (issue 43): the checkpoint sent straight from device memory by nvme_rsrdma
    # against the host CPU path (staged through DRAM, the C nvme-rdma).
    dev_rows = [("ckptwrite4m", "4M checkpoint write QD4 (MiB/s)"),
                ("ckptread4m", "4M checkpoint read QD4 (MiB/s)")]
    for backing, what in (("device-ram", "an ivshmem BAR of host RAM, published by the test-only"
                                         " tests/p2pmem driver"),
                          ("device-cmb", "an emulated NVMe controller's memory buffer (MMIO)")):
        if not any(k[0] == backing for k in data):
            continue
        print()
        print("device memory (%s): %s;" % (backing, what))
        print("  4 MiB blocks to and from rsrdma-target: nvme_rsrdma straight from and into device"
              " memory, the host")
        print("  CPU path staged through DRAM (a CPU copy each way) with the C nvme-rdma")
        print("%-38s %10s %10s %7s %11s" % ("figure", "direct", "staged", "ratio", "per round"))
        for job, label in dev_rows:
            a = med(backing, "rsrdma", job, "bw_mib_s")
            b = med(backing, "rdma", job, "bw_mib_s")
            if a is None and b is None:
                continue
            pairs = paired(backing, job, "bw_mib_s")
            ratio = statistics.median(pairs) if pairs else (a / b if a is not None and b else None)
            print("%-38s %10s %10s %7s %11s" % (
                label, "-" if a is None else "%.1f" % a, "-" if b is None else "%.1f" % b,
                "-" if ratio is None else "%.2fx" % ratio,
                "%.2f-%.2f" % (min(pairs), max(pairs)) if pairs else "-"))
            out["figures"].append({"backing": backing, "figure": label, "job": job,
                                   "metric": "bw_mib_s", "rsrdma": a, "area": None, "c_rdma": b,
                                   "ratio_rsrdma_over_c": ratio, "round_ratios": pairs,
                                   "ratio_area_over_c": None, "area_round_ratios": [],
                                   "higher_is_better": True, "pct_of_raw_rxe": None,
                                   "c_path": "staged through DRAM"})
            if backing == "device-ram":
                goals.append(("%s: %s >= staged" % (backing, label), ratio, lambda v: v >= 1.0))
    # The CMB rows measure QEMU's emulation of MMIO more than the transports (see testing.rst):
    # reported, not held to a goal.
    below = [f for f in out["figures"] if f["ratio_rsrdma_over_c"] is not None and
             f["backing"] != "device-cmb" and
             "CPU" not in f["figure"] and
             (f["ratio_rsrdma_over_c"] < 1.0 if f["higher_is_better"] else f["ratio_rsrdma_over_c"] > 1.0)]
    print()
    print("goals:")
    met = 0
    for label, value, ok in goals:
        good = value is not None and ok(value)
        met += good
        print("  %-4s %-52s %s" % ("met" if good else "NOT", label,
                                    "-" if value is None else "%.2f" % value))
    print("  %-4s %-52s %s" % ("met" if not below else "NOT", "no figure worse than C",
                                ", ".join("%s %s" % (f["backing"], f["figure"]) for f in below) or "-"))
    out["goals"] = [{"goal": g[0], "value": g[1], "met": g[1] is not None and g[2](g[1])} for g in goals]
    out["figures_worse_than_c"] = [(f["backing"], f["figure"]) for f in below]
    if errors:
        print()
        print("%d runs reported errors:" % len(errors))
        for e in errors[:10]:
            print("  %s" % json.dumps(e))
    out["errors"] = errors
    with open(dst, "w") as f:
        json.dump(out, f, indent=2)
    print()
    print("written: %s" % dst)


if __name__ == "__main__":
    {"record": record, "report": report}[sys.argv[1]](sys.argv[2:])
