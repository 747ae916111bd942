"""The README's Python examples run as written, and its two commands are the ones CI runs."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    namespace: dict = {"__name__": "__main__"}     # as `python example.py` runs them
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)


def test_ci_runs_the_readme_test_command():
    text = (ROOT / "README.md").read_text()
    commands = re.search(r"```sh\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_primitive_count_in_readme_is_current():
    from tracekern.primitives import REGISTRY

    assert f"The {len(REGISTRY)} primitives" in (ROOT / "README.md").read_text()
