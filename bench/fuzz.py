"""Fuzz Marina's /v1 from its own OpenAPI schema with schemathesis, longer
and with a fresh seed each run (the CI test, tests/e2e/test_bad_input.py,
uses one fixed seed and 100 examples per operation).

    .venv/bin/python bench/fuzz.py                 # 1000 examples per operation, random seed
    .venv/bin/python bench/fuzz.py --examples 5000 --seed 7

Starts a real gunicorn on a scratch SQLite ledger against the scripted
upstream, runs `schemathesis run` with every check but
positive_data_acceptance (see the CI test for why), then counts 5xx traces.
Exits non-zero on any finding; schemathesis prints how to replay it.
"""
from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import MARINA_KEY
from tests.e2e.conftest import find_secrets, server_env
from tests.e2e.servers import SqliteTemplate, start_gunicorn
from tests.upstream import ScriptedUpstream


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="max examples per operation")
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh random seed")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)

    upstream = ScriptedUpstream().start()
    with tempfile.TemporaryDirectory(prefix="marina-fuzz-") as tmp:
        work = Path(tmp)
        ledger = SqliteTemplate(work).new(work / "fuzz.sqlite3")
        server = start_gunicorn(database_url=ledger.url, log_path=work / "gunicorn.log", env=server_env(upstream.base_url))
        try:
            print(f"fuzz: seed {seed}, {args.examples} examples per operation against {server.base_url}", flush=True)
            result = subprocess.run(
                [
                    sys.executable, "-m", "schemathesis.cli", "run", f"{server.base_url}/openapi.json",
                    "--header", f"Authorization: Bearer {MARINA_KEY}",
                    "--checks", "all", "--exclude-checks", "positive_data_acceptance",
                    "--max-examples", str(args.examples), "--seed", str(seed),
                    "--generation-database", "none", "--no-color",
                ],
                cwd=work,
            )
            errors = ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE http_status >= 500")
            traces = ledger.one("SELECT COUNT(*) FROM ledger_trace")
        finally:
            server.terminate()
            upstream.stop()
        leaked = find_secrets(server.log()) or find_secrets(ledger.dump())
    print(f"fuzz: {traces} requests traced, {errors} answered 5xx; keys in logs or database: {'yes' if leaked else 'no'}")
    return 1 if result.returncode or errors or leaked else 0


if __name__ == "__main__":
    sys.exit(main())
