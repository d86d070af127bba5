#!/usr/bin/env python3
"""Draws the headline plots of bench/RESULTS.md from the raw logs in
bench/logs/ into bench/plots/*.png (issue: GPU speed, item 6).

Every benchmark prints Markdown tables; a log is a benchmark's output with
a header of `# key: value` lines (date, commit, device or cpu, command).
Each plot takes the newest log of its kind (file names end in the date)
and names it, with its device and commit, under the plot, so a figure is
never separated from its raw output:

  cpu-prefill.png     GFLOP/s against L (attention-bench), the same run's
                      sgemm ceiling drawn across
  cpu-decode.png      GB/s of K and V against Lk (attention-bench), the
                      same run's memcpy and read bandwidths drawn across
  cpu-recurrence.png  M tokens/s against L for every rule
                      (recurrence-bench --only rules): flat is linear in L
  gpu-prefill.png     TFLOP/s against L per head dim, beside PyTorch's SDPA
                      backends and FlexAttention from the same session
                      (cuda-attention-bench + torch-attention-baseline.py)
  gpu-decode.png      GB/s of K and V against Lk, dense and over a paged
                      cache, the copy bandwidth of the same session drawn
                      across
  gpu-gated-delta.png M tokens/s against L, beside FLA's chunked kernel
                      when the session measured it (bench/fla-baseline.py)

A plot whose logs are missing is skipped with a line saying which. The
logs of one GPU session are one file, `gpu-<date>.txt` (run.sh's bench,
torch and fla steps, in that order).

    python3 bench/plot.py [--logs bench/logs] [--out bench/plots]
"""
import argparse
import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path):
    """The log's `# key: value` header and its Markdown tables, each a
    (header cells, rows of cells) pair, in the order printed."""
    header, tables, table = {}, [], None
    for line in path.read_text().splitlines():
        match = re.match(r"#\s*([a-z ]+):\s*(.*)", line)
        if match and not tables and table is None:
            header.setdefault(match.group(1).strip(), match.group(2).strip())
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if table is None:
                table = (cells, [])
            elif not all(re.fullmatch(r"-+", c) for c in cells if c):
                table[1].append(cells)
        elif table is not None:
            tables.append(table)
            table = None
    if table is not None:
        tables.append(table)
    return header, tables


def tables_named(tables, first_cell):
    """Rows of every table whose first header cell starts with
    `first_cell`, as dicts by header cell."""
    rows = []
    for head, body in tables:
        if head[0].startswith(first_cell):
            rows += [dict(zip(head, cells)) for cells in body]
    return rows


def number(text):
    """The cell's leading number, or None (a failed row: 'failed: ...')."""
    match = re.match(r"\s*([-+]?\d+(\.\d+)?)", text or "")
    return float(match.group(1)) if match else None


def value_after(path, label):
    """The number after `label=` or `label:` anywhere in the log."""
    match = re.search(re.escape(label) + r"\s*[=:]\s*([\d.]+)",
                      path.read_text())
    return float(match.group(1)) if match else None


def lengths_axis(ax, lengths):
    """A log-scale axis ticked at the measured lengths, written out."""
    ax.set_xscale("log")
    ax.set_xticks(sorted(set(lengths)))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())


def caption(ax, path, header):
    machine = header.get("device") or header.get("cpu", "")
    commit = header.get("commit", "")[:10]
    ax.figure.text(0.01, 0.01, f"{path.name}: {machine}, commit {commit}",
                   fontsize=7, color="0.35")


def finish(fig, ax, log, out, name, lengths, **labels):
    """The labels from 0 up, the lengths' axis, the legend and the log's
    caption; then saves the plot."""
    ax.set(ylim=(0, None), **labels)
    lengths_axis(ax, lengths)
    ax.legend(fontsize=8)
    caption(ax, log.path, log.header)
    save(fig, out, name)


class Log:
    """The newest log matching `pattern`, read (see read_log)."""

    def __init__(self, path):
        self.path = path
        self.header, self.tables = read_log(path)

    @staticmethod
    def newest(logs, pattern, plots):
        found = sorted(logs.glob(pattern))
        if not found:
            print(f"plot: no {pattern} log; skipping {plots}")
            return None
        return Log(found[-1])


def save(fig, out, name):
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    print(f"plot: {out / name}")


def cpu_attention(logs, out):
    log = Log.newest(logs, "cpu-attention-*.txt", "cpu-prefill, cpu-decode")
    if log is None:
        return
    tables = log.tables
    sgemm = value_after(log.path, "sgemm")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rows = tables_named(tables, "prefill")
    for mask in ("dense", "causal"):
        for hkv in sorted({r["Hkv"] for r in rows}, key=int, reverse=True):
            line = [(int(r["L"]), number(r["GFLOP/s"])) for r in rows
                    if r["prefill"] == mask and r["Hkv"] == hkv]
            ax.plot(*zip(*line), marker="o", label=f"{mask}, Hkv = {hkv}")
    if sgemm:
        ax.axhline(sgemm, color="k", ls="--", lw=1,
                   label=f"OpenBLAS sgemm {sgemm:.0f}")
    finish(fig, ax, log, out, "cpu-prefill.png", [int(r["L"]) for r in rows],
           xlabel="L (queries = keys)", ylabel="GFLOP/s",
           title="CPU prefill, f32, H = 8, D = 128")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rows = tables_named(tables, "decode")
    for hkv in sorted({r["Hkv"] for r in rows}, key=int, reverse=True):
        line = [(int(r["Lk"]), number(r["GB/s (K+V)"])) for r in rows
                if r["Hkv"] == hkv]
        ax.plot(*zip(*line), marker="o", label=f"Hkv = {hkv}")
    copy = [number(r["memcpy GB/s"]) for r in rows]
    if copy:
        ax.axhline(max(copy), color="k", ls="--", lw=1,
                   label=f"memcpy {max(copy):.0f} (read + written)")
    # Logs before the read ceiling have no such column.
    read = [number(r["read GB/s"]) for r in rows if "read GB/s" in r]
    if read:
        ax.axhline(max(read), color="k", ls=":", lw=1,
                   label=f"read {max(read):.0f}")
    finish(fig, ax, log, out, "cpu-decode.png", [int(r["Lk"]) for r in rows],
           xlabel="Lk", ylabel="GB/s of K and V",
           title="CPU decode, f32, H = 8, D = 128, Lq = 1")


def cpu_recurrence(logs, out):
    log = Log.newest(logs, "cpu-recurrence-rules-*.txt", "cpu-recurrence")
    if log is None:
        return
    rows = tables_named(log.tables, "rule")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for rule in dict.fromkeys(r[next(iter(r))] for r in rows):
        points = sorted((int(r["L"]), 1.0 / number(r["us/token"]))
                        for r in rows if r[next(iter(r))] == rule)
        # Runs of the log side by side: the best per length, drawn as a
        # line, and every run's point.
        best = {}
        for length, rate in points:
            best[length] = max(rate, best.get(length, 0.0))
        (line,) = ax.plot(list(best), list(best.values()), marker="o",
                          label=rule)
        ax.scatter(*zip(*points), s=10, color=line.get_color(), alpha=0.5)
    finish(fig, ax, log, out, "cpu-recurrence.png", [int(r["L"]) for r in rows],
           xlabel="L (tokens)", ylabel="M tokens/s",
           title="CPU chunked recurrences, B = 1, H = 8, Dk = Dv = 128, C = 64")


def gpu(logs, out):
    log = Log.newest(logs, "gpu-*.txt",
                     "gpu-prefill, gpu-decode, gpu-gated-delta")
    if log is None:
        return
    tables = log.tables

    ours = [r for r in tables_named(tables, "prefill")
            if "implementation" not in r]
    # The plot is bf16's: f32 rows (ours and SDPA's) stay in the tables.
    anchors = [r for r in tables_named(tables, "prefill")
               if "implementation" in r and "f32" not in r["implementation"]]
    dims = sorted({int(r["D"]) for r in ours})
    if ours:
        fig, axes = plt.subplots(1, len(dims), figsize=(4.2 * len(dims), 4.2),
                                 squeeze=False, sharey=True)
        for ax, dim in zip(axes[0], dims):
            for mask, style in (("dense", "-"), ("causal", "--")):
                def series(rows, name):
                    return sorted((int(r["L"]), number(r["TFLOP/s"]))
                                  for r in rows if int(r["D"]) == dim and
                                  r["prefill"] == mask and name(r) and
                                  number(r["TFLOP/s"]) is not None)
                # Logs before the products column hold mma.sync alone.
                for products, color in (("mma.sync", "C0"), ("wgmma x1", "C5"),
                                        ("wgmma x2", "C6")):
                    line = series(ours, lambda r: r.get(
                        "products", "mma.sync") == products)
                    if line:
                        ax.plot(*zip(*line), style, marker="o", color=color,
                                label=f"attn ({products}), {mask}")
                for i, impl in enumerate(dict.fromkeys(
                        r["implementation"] for r in anchors)):
                    line = series(anchors,
                                  lambda r: r["implementation"] == impl)
                    if line:
                        ax.plot(*zip(*line), style, marker=".",
                                color=f"C{i + 1}", label=f"{impl}, {mask}")
            ax.set(xlabel="L", title=f"D = {dim}",
                   ylim=(0, None))
            lengths_axis(ax, [int(r["L"]) for r in ours])
        axes[0][0].set_ylabel("TFLOP/s (bf16, visible work)")
        axes[0][-1].legend(fontsize=7)
        fig.suptitle("GPU prefill, 16K tokens per call (B = 16K / L), "
                     "H = 2048 / D", fontsize=10)
        caption(axes[0][0], log.path, log.header)
        save(fig, out, "gpu-prefill.png")
    else:
        print(f"plot: {log.path.name} has no prefill table; skipping "
              "gpu-prefill")

    rows = tables_named(tables, "decode")
    if rows:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        line = sorted((int(r["Lk"]), number(r["GB/s of K and V"]))
                      for r in rows)
        ax.plot(*zip(*line), marker="o", label="attn, dense decode")
        paged = sorted((int(r["Lk"]), number(r["GB/s of K and V"]))
                       for r in tables_named(tables, "paged decode"))
        if paged:
            ax.plot(*zip(*paged), marker=".",
                    label="attn, paged decode (pages of 16, scattered)")
        copy = value_after(log.path, "copy")
        if copy:
            ax.axhline(copy, color="k", ls="--", lw=1,
                       label=f"device copy {copy:.0f} (read + written)")
        finish(fig, ax, log, out, "gpu-decode.png",
               [int(r["Lk"]) for r in rows], xlabel="Lk",
               ylabel="GB/s of K and V",
               title="GPU decode, bf16, H = 32, Hkv = 8, D = 128")

    rows = tables_named(tables, "Gated DeltaNet")
    fla = tables_named(tables, "FLA")
    if rows:
        # Prefill rows only (L > 1): one line per batch and kernel.
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        series = [("attn, chunked", rows)] + [
            (kernel, [r for r in fla if r[next(iter(r))] == kernel])
            for kernel in dict.fromkeys(r[next(iter(r))] for r in fla)]
        lengths = []
        for name, body in series:
            for batch in dict.fromkeys(r["B"] for r in body):
                line = sorted((int(r["L"]), number(r["M tokens/s"]))
                              for r in body if r["B"] == batch and
                              int(r["L"]) > 1 and
                              number(r["M tokens/s"]) is not None)
                if line:
                    ax.plot(*zip(*line), marker="o" if "attn" in name
                            else ".", label=f"{name}, B = {batch}")
                    lengths += [length for length, _ in line]
        finish(fig, ax, log, out, "gpu-gated-delta.png", lengths,
               xlabel="L (tokens per sequence)", ylabel="M tokens/s",
               title="GPU Gated DeltaNet prefill, bf16, Hk = 16, Hv = 32, "
                     "D = 128")


def main():
    root = pathlib.Path(__file__).resolve().parent
    parser = argparse.ArgumentParser()
    parser.add_argument("--logs", type=pathlib.Path, default=root / "logs")
    parser.add_argument("--out", type=pathlib.Path, default=root / "plots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cpu_attention(args.logs, args.out)
    cpu_recurrence(args.logs, args.out)
    gpu(args.logs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
