#!/usr/bin/env python3
"""tests/gpu/run.sh's summary: reads the checks' results (results.tsv: name, status, seconds, detail)
and the figures (figures.tsv: section, name, value, unit), prints one table, and writes summary.json.
A preflight that failed (preflight-*) is named again after the table with the later failures marked
as following from it ("[after NAME FAIL] ..." in their detail), so that the cause comes first.
Usage: summarize.py OUT_DIR MODE [ELAPSED_S BUDGET_S]   (MODE: gpu or dry-run)
Exit status: 1 when a check failed or timed out, else 0."""
import json
import os
import sys


def read_tsv(path, fields):
    rows = []
    if os.path.exists(path):
        for line in open(path, encoding="utf-8", errors="replace"):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= fields:
                rows.append(parts[:fields - 1] + ["\t".join(parts[fields - 1:])])
    return rows


def main():
    out, mode = sys.argv[1], sys.argv[2]
    elapsed = float(sys.argv[3]) if len(sys.argv) > 3 else None
    budget = float(sys.argv[4]) if len(sys.argv) > 4 else None
    results = [{"check": n, "status": s, "seconds": float(t or 0), "detail": d}
               for n, s, t, d in read_tsv(os.path.join(out, "results.tsv"), 4)]
    figures = [{"section": s, "name": n, "value": v, "unit": u}
               for s, n, v, u in read_tsv(os.path.join(out, "figures.tsv"), 4)]
    counts = {k: sum(1 for r in results if r["status"] == k) for k in ("PASS", "FAIL", "TIMEOUT", "SKIP")}
    print(f"== tests/gpu summary ({mode}) ==")
    print(f"{'check':<34} {'result':<7} {'seconds':>7}  detail")
    for r in results:
        print(f"{r['check']:<34} {r['status']:<7} {r['seconds']:>7.1f}  {r['detail'][:100]}")
    if figures:
        print()
        print(f"{'figure':<44} {'value':>12}  unit")
        section = None
        for f in figures:
            if f["section"] != section:
                section = f["section"]
                print(f"[{section}]")
            print(f"  {f['name']:<42} {f['value']:>12}  {f['unit']}")
    failed = counts["FAIL"] + counts["TIMEOUT"]
    causes = []
    for r in results:
        if r["check"].startswith("preflight") and r["status"] in ("FAIL", "TIMEOUT"):
            mark = f"[after {r['check']} {r['status']}]"
            following = [x["check"] for x in results if x["detail"].startswith(mark)]
            causes.append({"check": r["check"], "status": r["status"], "detail": r["detail"], "followed_by": following})
            print(f"\nfirst cause: {r['check']} {r['status']}: {r['detail'][:300]}")
            if following:
                print(f"  and {len(following)} later failures marked {mark}: {', '.join(following)}")
    print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['TIMEOUT']} timed out, {counts['SKIP']} skipped"
          + (f" in {elapsed:.0f} s" if elapsed is not None else ""))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"mode": mode, "ok": failed == 0, "counts": counts, "elapsed_s": elapsed, "budget_s": budget,
                   "preflight_failures": causes, "checks": results, "figures": figures}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
