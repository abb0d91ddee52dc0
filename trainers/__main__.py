"""``python -m trainers CONFIG.json [--trainer module:function]``: run one trial alone.

Prints one JSON line per report, then the final metrics as one JSON line. A config
file or trainer entry that cannot be loaded is one line on stderr and exit status 2;
a trial whose loss goes non-finite is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from trainers.api import PrintReporter, TrainerImportError, TrialConfig, _json_float, capabilities_of, load_trainer

DEFAULT_TRAINER = "trainers.classifier:fit"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainers", description="Run one training trial from a JSON config."
    )
    parser.add_argument("config", help="a JSON file holding a TrialConfig (TrialConfig.to_dict())")
    parser.add_argument("--trainer", default=DEFAULT_TRAINER, help=f"module:function (default {DEFAULT_TRAINER})")
    return parser


def _fail(message: str, status: int) -> int:
    print(f"python -m trainers: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = TrialConfig.from_json_file(args.config)
    except (OSError, ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        return _fail(f"cannot load config {args.config}: {exc}", 2)
    try:
        trainer = load_trainer(args.trainer)
    except TrainerImportError as exc:
        return _fail(str(exc), 2)
    info = capabilities_of(trainer)
    unknown = info.unknown_params(config.params)
    if unknown:
        accepted = sorted(info.accepted_params or ())
        return _fail(f"{args.config}: unknown params {unknown}; {args.trainer} accepts {accepted}", 2)
    try:
        metrics = trainer(config, PrintReporter())
    except FloatingPointError as exc:
        return _fail(f"trial failed: {exc}", 1)
    print(json.dumps({k: _json_float(v) for k, v in metrics.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
