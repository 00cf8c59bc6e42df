"""Cost of per-call classification in `call_facts`, side by side with a tool of one class.

Run: python benchmarks/bench_classify.py
Goal: a tool without classification pays nothing measurable; a shell command seen before
(a repeat, the case the guard is about) costs about what an unclassified call costs; a new
command line costs tens of microseconds, still small next to running a shell command.
"""

from __future__ import annotations

from bench_engine import _median_ns  # the same timing loop, run from the repository root

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.decisions.engine import call_facts

CONFIG = GuardConfig(
    tools={
        "bash": {"preset": "shell"},
        "str_replace_editor": {"preset": "editor"},
        "lookup": "pure",
    }
)
CHAIN = "cd /repo && grep -rn 'def parse' src/ 2>/dev/null | head -20 && git diff --stat"
HEREDOC = "cat > src/new_module.py <<'EOF'\n" + "x = 1\n" * 200 + "EOF"


def main() -> None:
    cases = [
        ("unclassified tool", lambda i: call_facts(CONFIG, "lookup", {"command": CHAIN})),
        ("editor preset", lambda i: call_facts(CONFIG, "str_replace_editor", {"command": "view"})),
        (
            "shell, repeated chain (cached)",
            lambda i: call_facts(CONFIG, "bash", {"command": CHAIN}),
        ),
        (
            "shell, new chain every call",
            lambda i: call_facts(CONFIG, "bash", {"command": f"{CHAIN} {i}"}),
        ),
        (
            "shell, new 200-line heredoc",
            lambda i: call_facts(CONFIG, "bash", {"command": f"{HEREDOC}\n# {i}"}),
        ),
    ]
    base = None
    print(f"{'call_facts for':<34} {'us':>8} {'vs unclassified':>16}")
    for name, fn in cases:
        cost = _median_ns(fn)
        base = base or cost
        print(f"{name:<34} {cost / 1000:>8.2f} {cost / base:>15.2f}x")


if __name__ == "__main__":
    main()
