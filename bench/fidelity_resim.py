"""``python -m bench.fidelity_resim``: re-run the simulator side of a ``sim_fidelity`` result, no engine.

    .venv/bin/python -m bench.fidelity_resim --from bench/out/fidelity.json --out bench/out/fidelity-resim.json

Every load of the result is rebuilt (same trace slice, rate and seed, from the result's ``settings``),
simulated from the profile the result names (or ``--profile``) with the send times the engine saw, and
compared with the engine's stored metrics. For changes to the simulator only: the engine side is the
stored run, the simulator is still configured from the profile alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from bench.engine_run import log
from bench.fidelity_metrics import compare
from bench.fidelity_workload import build_stream
from bench.sim_fidelity import simulate
from sim.engine.measured import load_profile


def resimulate(result: dict[str, Any], profile_path: Path) -> list[dict[str, Any]]:
    profile = load_profile(profile_path)
    st = result["settings"]
    trace, duration_s, start_s, seed = Path(st["trace"]), st["duration_s"], st["start_s"], st["seed"]
    rows: list[dict[str, Any]] = []
    for load in result["loads"]:
        stream = build_stream(trace, load["rate_rps"], duration_s, profile.engine.max_model_len, start_s, seed)
        if len(stream.requests) != load["requests"]:
            raise ValueError(f"load {load['load']}: rebuilt {len(stream.requests)} requests, "
                             f"the run had {load['requests']}")
        sim = simulate(profile, stream, load["outcomes"]["arrival_s"], seed)
        rows += compare(load["load"], load["real"], sim)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.fidelity_resim", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--from", dest="source", type=Path, required=True, help="a bench.sim_fidelity result")
    p.add_argument("--profile", type=Path, default=None, help="default: the profile the result names")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    result = orjson.loads(args.source.read_bytes())
    profile = args.profile or Path(result["profile"]["path"])
    rows = resimulate(result, profile)
    for r in rows:
        log(f"load {r['load']:g} {r['metric']:15s} real {r['real']:10.1f} sim {r['sim']:10.1f} {r['rel_err']:+.1%}")
    if args.out is not None:
        args.out.write_bytes(orjson.dumps({"rows": rows, "source": str(args.source), "profile": str(profile)},
                                          option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
