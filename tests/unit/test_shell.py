"""The `shell` preset on real-looking commands: every rule of presets/shell.json."""

from __future__ import annotations

import ast

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.decisions.engine import call_facts
from langgraph_replay_guard.policy.shell import Unparsable, parse_script

CONFIG = GuardConfig(tools={"bash": {"preset": "shell"}})


def cls(command: str, config: GuardConfig = CONFIG) -> str:
    """The class a `bash` call gets: "pure", "volatile", "idempotent" or "unsafe"."""
    facts = call_facts(config, "bash", {"command": command})
    return "volatile" if facts.volatile else facts.replay


def check(commands: list[str], expected: str) -> None:
    got = {command: cls(command) for command in commands}
    wrong = {command: c for command, c in got.items() if c != expected}
    assert not wrong, f"expected {expected}: {wrong}"


def test_reads_are_pure():
    check(
        [
            "cat src/calc.py",
            "head -n 40 src/calc.py",
            "tail -20 logs/app.log",
            "ls -la",
            "ls -la src/ tests/",
            "tree -L 2",
            "find . -name '*.py' -not -path './.venv/*'",
            "grep -rn 'def parse' src/",
            "rg -n 'TODO' --type py",
            "wc -l src/*.py",
            "nl -ba src/calc.py | sed -n '10,30p'",
            "sed -n '1,80p' src/calc.py",
            "awk -F, '{print $2}' data.csv",
            "jq '.dependencies' package.json",
            "diff -u a.txt b.txt",
            "pwd",
            "echo hello",
            "which python",
            "stat setup.py",
            "file README.md",
            "du -sh .",
            "pip list",
            "pip show requests",
            "python --version",
            "node --version",
            "rm --help",
        ],
        "pure",
    )


def test_git_reads_are_pure():
    check(
        [
            "git status",
            "git status --short",
            "git diff",
            "git diff HEAD~1 -- src/calc.py",
            "git log --oneline -10",
            "git log -p -1",
            "git show HEAD:src/calc.py",
            "git blame -L 10,20 src/calc.py",
            "git branch",
            "git branch -a",
            "git branch --show-current",
            "git rev-parse HEAD",
            "git ls-files",
            "git grep -n parse",
            "git stash list",
            "git remote -v",
            "git tag",
            "git config --get user.email",
            "git -C /repo status",
            "git --no-pager log --oneline",
            "git -c color.ui=never diff",
        ],
        "pure",
    )


def test_git_writes_are_not_pure():
    check(
        [
            "git checkout main",
            "git checkout -- src/calc.py",
            "git switch -c fix",
            "git commit -am 'fix'",
            "git add -A",
            "git reset --hard HEAD~1",
            "git restore src/calc.py",
            "git stash",
            "git stash pop",
            "git pull",
            "git push origin fix",
            "git fetch",
            "git merge fix",
            "git rebase main",
            "git cherry-pick abc123",
            "git apply fix.patch",
            "git clean -fd",
            "git branch fix-1",
            "git branch -D old",
            "git tag v1.0",
            "git remote add upstream https://example.com/r.git",
            "git config user.email a@b.c",
            "git -C /repo checkout main",
            "git diff --output=changes.patch",
            "git format-patch -1",
        ],
        "unsafe",
    )


def test_file_system_writes_and_installs_are_not_pure():
    check(
        [
            "rm -rf build/",
            "mv a.py b.py",
            "cp a.py b.py",
            "mkdir -p src/new",
            "touch src/__init__.py",
            "chmod +x run.sh",
            "ln -s a b",
            "pip install -e .",
            "pip install requests==2.31",
            "python -m pip install -r requirements.txt",
            "npm install",
            "npm i lodash",
            "yarn add react",
            "apt-get install -y jq",
            "cargo add serde",
            "uv sync",
            "poetry add httpx",
            "black src/",
            "ruff format .",
            "ruff check --fix .",
            "isort src",
            "patch -p1 < fix.diff",
            "tar -xzf archive.tgz",
            "wget https://example.com/file",
            "kill 1234",
        ],
        "unsafe",
    )


@pytest.mark.parametrize(
    "command",
    [
        "echo 'x = 1' > src/config.py",
        "echo 'x = 1' >> src/config.py",
        "cat a.py > b.py",
        "grep -rn TODO . >todo.txt",
        "ls >| listing.txt",
        "pytest &> out.log",
        "pytest &>> out.log",
        "cat a.py 1> b.py",
        "cat a.py 2> errors.txt",
        "ls > $OUT",
        "grep -rn foo . | tee results.txt",
        "grep -rn foo . | tee -a results.txt",
        "sed -i 's/old/new/g' src/calc.py",
        "sed -i.bak 's/old/new/' src/calc.py",
        "sed -ni 's/old/new/p' src/calc.py",
        "sed --in-place 's/a/b/' f",
        "sed -n 's/a/b/w out.txt' f",
        "dd if=/dev/zero of=disk.img bs=1M count=1",
        "sort -o sorted.txt data.txt",
        "awk '{print $1 > \"out.txt\"}' data.txt",
        "awk 'BEGIN { system(\"rm -rf x\") }'",
        "find . -name '*.pyc' -delete",
        "find . -name '*.tmp' -exec rm {} \\;",
        "find . -type f | xargs rm",
        "curl -sSL -o get.sh https://example.com/get.sh",
        "curl -X POST -d '{}' http://localhost:8000/api",
    ],
)
def test_writing_into_files_is_not_pure(command):
    assert cls(command) == "unsafe"


@pytest.mark.parametrize(
    "command",
    [
        "cat src/calc.py 2>/dev/null",
        "ls missing 2>/dev/null || echo none",
        "grep -rn foo . >/dev/null",
        "grep -q foo file > /dev/null 2>&1",
        "cat a.py 2>&1 | head",
        "cat a.py &>/dev/null",
        "echo done >&2",
        "echo done 1>&2",
        "wc -l < src/calc.py",
        "grep foo <<< 'some text'",
        "echo '>' means greater",
        'echo "a > b" && echo "x | y; rm z"',
        "grep -rn foo . | tee",
        "grep -rn foo . | tee /dev/null",
        "dd if=src/calc.py bs=1 count=10",
        "find . -name '*.py' -exec grep -l 'import os' {} \\;",
        "find . -name '*.py' | xargs grep -l parse",
        "find . -name '*.py' | xargs -I{} wc -l {}",
    ],
)
def test_null_redirections_fd_duplication_and_quoted_operators_are_not_writes(command):
    assert cls(command) == "pure"


def test_chains_get_the_class_of_their_least_safe_command():
    assert cls("cat a.py && cat b.py") == "pure"
    assert cls("ls src | grep calc | sort | uniq -c") == "pure"
    assert cls("cat a.py; rm a.py") == "unsafe"
    assert cls("cat a.py || rm a.py") == "unsafe"
    assert cls("cat a.py | python") == "unsafe"
    assert cls("git status && git checkout -b fix") == "unsafe"
    assert cls("pytest -q && git diff") == "idempotent"
    assert cls("cat a.py && pytest -q") == "idempotent"
    assert cls("date && cat a.py") == "volatile"
    assert cls("(cd src && ls)") == "idempotent"
    assert cls("{ cat a; cat b; }") == "pure"
    assert cls("ls & rm x") == "unsafe"


def test_newlines_separate_commands():
    # shlex would read this as `cat a.py rm b.py`: one harmless cat.
    assert cls("cat a.py\nrm b.py") == "unsafe"
    assert cls("cat a.py\nls\ngit status\n") == "pure"
    assert cls("cat a.py \\\n  b.py") == "pure"  # a continued line is one command


def test_cd_and_other_session_changes_are_idempotent():
    # In a persistent shell (most agent shells) `cd` changes what later relative paths mean:
    # it starts a new epoch, so a read before it is not reused after it.
    check(
        [
            "cd /repo",
            "cd /repo && cat src/calc.py",
            "cd /repo && git status",
            "export PYTHONPATH=src",
            "FOO=1",
            "source .venv/bin/activate",
            ". venv/bin/activate",
        ],
        "idempotent",
    )
    assert cls("cd /repo && rm -rf build") == "unsafe"
    assert cls("source ./deploy.sh") == "unsafe", "sourcing a script runs it"


def test_test_runners_builds_and_linters_are_idempotent():
    check(
        [
            "pytest",
            "pytest -x -q tests/test_calc.py",
            "pytest tests/ 2>&1 | tail -30",
            "python -m pytest -q",
            "python3 -m pytest tests/test_calc.py::test_add -vv",
            ".venv/bin/python -m pytest",
            "python -u -m pytest",
            "python -m unittest discover",
            "uv run pytest",
            "poetry run pytest -q",
            "FOO=1 pytest",
            "timeout 300 pytest -x",
            "cd /repo && python -m pytest -q",
            "tox -e py311",
            "npm test",
            "npm run test -- --watch=false",
            "npm run build",
            "yarn test",
            "npx jest src/calc.test.js",
            "./node_modules/.bin/jest",
            "cargo test",
            "cargo build --release",
            "go test ./...",
            "make",
            "make test",
            "make -j4 test",
            "mypy src",
            "ruff check .",
            "black --check src",
            "flake8 src",
            "tsc --noEmit",
            "./gradlew test",
            "docker exec -it app pytest -q",
        ],
        "idempotent",
    )


def test_volatile_reads():
    check(
        [
            "date",
            "sleep 5",
            "sleep 5 && cat server.log",
            "ps aux | grep python",
            "df -h",
            "curl -s http://localhost:8000/health",
            "tail -f server.log",
            "docker ps",
            "kubectl get pods",
            "echo `date`",
            "echo $(date +%s)",
        ],
        "volatile",
    )


def test_python_c_is_pure_only_when_recognisably_read_only():
    check(
        [
            "python -c 'import sys; print(sys.version)'",
            'python3 -c "import platform; print(platform.python_version())"',
            "python -c 'import json, os; print(os.getcwd())'",
            "python -c 'print(1 + 2)'",
        ],
        "pure",
    )
    check(
        [
            "python -c 'import os; os.remove(\"x\")'",
            'python -c \'open("x", "w").write("y")\'',
            "python -c 'import shutil; shutil.rmtree(\"build\")'",
            "python -c 'import requests; print(requests.__version__)'",
            'python -c \'__import__("os").system("rm -rf x")\'',
            "python -c 'print(().__class__.__bases__)'",
            "python -c 'import subprocess; subprocess.run([\"ls\"])'",
            "python -c 'print(unclosed'",
            "python script.py",
            "python reproduce.py",
            "python",
            "python - <<'EOF'\nprint(1)\nEOF",
            "python manage.py migrate",
            "node -e 'console.log(1)'",
        ],
        "unsafe",
    )


def test_heredocs():
    assert cls("cat <<'EOF'\nhello > world; rm -rf /\nEOF") == "pure", "the body is data"
    assert cls("cat <<EOF\nplain text\nEOF\nls") == "pure"
    assert cls("cat > src/new.py <<'EOF'\nprint('hi')\nEOF") == "unsafe"
    assert cls("cat <<-EOF > f.txt\n\tindented\n\tEOF") == "unsafe"
    assert cls("python3 <<'EOF'\nimport os\nEOF") == "unsafe"
    assert cls("cat <<EOF\n$(rm -rf x)\nEOF") == "unsafe", "an expanding body runs commands"
    assert cls("cat <<'EOF'\nno end") == "unsafe", "an unterminated heredoc is unrecognised"


def test_command_substitution_is_classified_too():
    assert cls("cat $(ls src/*.py)") == "pure"
    assert cls("cat `find . -name calc.py`") == "pure"
    assert cls('echo "$(rm -rf build)"') == "unsafe"
    assert cls("echo `rm x`") == "unsafe"
    assert cls("echo $(( $(rm x) + 1 ))") == "unsafe"
    assert cls("echo ${X:-$(rm x)}") == "unsafe"
    assert cls("diff <(git show HEAD:a.py) a.py") == "pure"
    assert cls("$(which python) script.py") == "unsafe", "the program itself is unknown"
    assert cls("$EDITOR a.py") == "unsafe"


def test_wrappers_and_nested_shells_are_looked_through():
    assert cls("sudo cat /etc/hosts") == "pure"
    assert cls("sudo rm -rf /tmp/x") == "unsafe"
    assert cls("time git status") == "pure"
    assert cls("env") == "pure"
    assert cls("env FOO=1 rm x") == "unsafe"
    assert cls("bash -c 'cat a.py && git diff'") == "pure"
    assert cls("sh -c 'rm -rf build'") == "unsafe"
    assert cls('bash -lc "cd /repo && git log"') == "idempotent"
    assert cls("bash run_tests.sh") == "unsafe", "a script file is unrecognised"
    assert cls("docker exec app cat /etc/os-release") == "pure"
    assert cls("nohup python server.py &") == "unsafe"


def test_loops_and_conditionals():
    assert cls("for f in src/*.py; do wc -l $f; done") == "pure"
    assert cls("for f in src/*.py; do rm $f; done") == "unsafe"
    assert cls("if [ -f setup.py ]; then cat setup.py; fi") == "pure"
    assert cls("if [ -f x ]; then rm x; else echo none; fi") == "unsafe"
    assert cls("while read line; do echo $line; done < files.txt") == "pure"
    assert cls("ls | while read f; do cat $f; done > all.txt") == "unsafe"
    assert cls("case $x in a) rm y;; esac") == "unsafe", "case is not analysed"


def test_unknown_and_unparsable_commands_are_never_pure():
    check(
        [
            "frobnicate --all",
            "./configure",
            "./run.sh",
            "scripts/check.py",
            "python manage.py shell",
            "npx create-react-app app",
            "make deploy",
            "make install",
            'echo "unterminated',
            "echo 'unterminated",
            "cat a.py >",
            "echo $(unterminated",
            "echo `unterminated",
            "cat <<",
            "f() { rm -rf /; }; f",
            "eval 'cat x'",
        ],
        "unsafe",
    )


@pytest.mark.parametrize(
    ("opening", "closing"),
    [("$(echo ", ")"), ("${a:-", "}"), ('"$(echo ', ')"'), ("$(echo ${a:-", "})")],
)
def test_substitutions_nested_deeper_than_the_lexer_reads_are_unsafe(opening, closing):
    # 32 levels are read (and the classifier gives up past its own depth of 8: unsafe);
    # 3,000 raised RecursionError out of the guard's decision before.
    assert cls("echo " + opening * 4 + "cat x" + closing * 4) == "pure"
    for depth in (33, 3_000):
        assert cls("echo " + opening * depth + "cat x" + closing * depth) == "unsafe"
    with pytest.raises(Unparsable, match="nested more than 32 deep"):
        parse_script("echo " + opening * 40 + "x" + closing * 40)


@pytest.mark.parametrize("code", ["-" * 3_000 + "1", "1+" * 4_000 + "1"])
def test_python_c_code_too_deep_for_the_parser_is_not_read_only(code):
    try:
        ast.parse(code)
    except RecursionError:
        expected = "unsafe"  # 3.11, 3.12: the RecursionError came out of the guard's decision
    else:
        expected = "pure"  # 3.13's parser takes it: an expression of constants
    assert cls(f"python -c '{code}'") == expected
    assert cls(f"bash -c \"python3 -c '{code}'\"") == expected


@pytest.mark.parametrize(
    "code",
    [
        "-" * 20_000 + "1",  # MemoryError in 3.11's parser
        "1+" * 5_000 + "1",
        'print(f"' + "{1}" * 20_000 + '")',  # 0.5 s to parse
    ],
)
def test_python_c_code_over_10_000_characters_is_not_read(code):
    assert cls(f"python -c '{code}'") == "unsafe"
    assert cls(f"bash -c \"python3 -c '{code}'\"") == "unsafe"


def test_long_prefixes_of_reserved_words_and_assignments_classify_the_command():
    # Each was cut one word at a time (a list copy per word: 1 to 3 s at 100 KB).
    assert cls("{ " * 45_000 + "ls") == "pure"
    assert cls("! " * 45_000 + "rm x") == "unsafe"
    assert cls("sudo " + "A=1 " * 20_000 + "ls") == "pure"
    assert cls("env " + "A=1 " * 20_000 + "rm x") == "unsafe"


def test_empty_command_is_neutral_and_missing_argument_is_unrecognised():
    # An empty line runs nothing; a call without a command argument is not recognised.
    assert cls("") == "pure"
    assert call_facts(CONFIG, "bash", {"cmd_typo": "ls"}).replay == "unsafe"
    assert call_facts(CONFIG, "bash", {"command": ["ls", "cat a"]}).replay == "pure"
    assert call_facts(CONFIG, "bash", {"command": ["ls", "rm a"]}).replay == "unsafe"
    assert call_facts(CONFIG, "bash", {"command": 42}).replay == "unsafe"
    assert call_facts(CONFIG, "bash", "cat a.py").replay == "pure", "a plain-string input"


def test_other_argument_names_and_command_arg():
    assert call_facts(CONFIG, "bash", {"cmd": "cat a"}).replay == "pure"
    assert call_facts(CONFIG, "bash", {"commands": ["git status", "ls"]}).replay == "pure"
    config = GuardConfig(tools={"bash": {"preset": "shell", "command_arg": "shell_command"}})
    assert call_facts(config, "bash", {"shell_command": "cat a"}).replay == "pure"
    assert call_facts(config, "bash", {"command": "cat a"}).replay == "unsafe"


def test_parser_keeps_quoted_words_and_operators_apart():
    script = parse_script("grep -n 'a && b' \"x y\" > /dev/null 2>&1 | wc -l; echo \\;")
    assert [c.words for c in script.commands] == [
        ["grep", "-n", "a && b", "x y"],
        ["wc", "-l"],
        ["echo", ";"],
    ]
    assert not any(c.writes for c in script.commands)
    with pytest.raises(Unparsable):
        parse_script("echo 'open")
    with pytest.raises(Unparsable):
        parse_script("x" * 100_001)
