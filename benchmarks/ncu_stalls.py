"""Where the warps of one kernel wait: Nsight Compute's per-instruction stall samples, summarised.

    ncu -k regex:paged_attention_kernel -c 1 --section SourceCounters --section WarpStateStats \\
        --page source --print-source sass --csv python benchmarks/profile_one.py 1 > p1.csv
    python benchmarks/ncu_stalls.py p1.csv [more.csv ...]

Prints each file's stall reasons over all samples, then the instructions holding the most samples
with their top three reasons (the SASS text shows which register a stalled instruction waits for).
"""

import collections
import csv
import sys


def _rows(path):
    with open(path) as fh:
        lines = [line for line in fh if line.startswith('"')]
    reader = csv.reader(lines)
    next(reader)  # "Kernel Name", ...
    header = next(reader)
    return header, [dict(zip(header, row)) for row in reader if len(row) >= len(header) - 1]


def _int(text):
    try:
        return int(text or 0)
    except ValueError:
        return 0


def main(paths, top=22):
    for path in paths:
        header, rows = _rows(path)
        reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
        samples = sum(_int(r["Warp Stall Sampling (All Samples)"]) for r in rows)
        totals = collections.Counter()
        for r in rows:
            for c in reasons:
                totals[c] += _int(r[c])
        print(path, "samples", samples,
              ", ".join(f"{k} {v} ({100 * v / max(samples, 1):.1f} %)" for k, v in totals.most_common(8)))
        for r in sorted(rows, key=lambda r: -_int(r["Warp Stall Sampling (All Samples)"]))[:top]:
            worst = sorted(((c, _int(r[c])) for c in reasons), key=lambda x: -x[1])[:3]
            print(f'  {_int(r["Warp Stall Sampling (All Samples)"]):7d}  {r["Source"][:60]:<60} {worst}')


if __name__ == "__main__":
    main(sys.argv[1:])
