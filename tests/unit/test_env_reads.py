"""Slipstream's settings are read from the process environment in one module, ``slipstream.streams.config``;
every other module calls it. Parsed with ast, like ``test_layers``: a read of ``os.environ`` or
``os.getenv`` elsewhere whose key is a ``SLIPSTREAM_`` name, or not a plain string at all (a constant
such as ``config.CACHE_ENV``), fails here. Copying the whole environment for a child process
(``{**os.environ, ...}``) and setting a variable are not reads. Each variable's name is spelled once,
as a ``*_ENV`` constant of that module."""
import ast

from tests.unit.test_layers import PACKAGES, ROOT

CONFIG = ROOT / "streams" / "config.py"
PREFIX = "SLIPSTREAM_"
READS = {"get", "pop", "setdefault", "__getitem__", "__contains__"}


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _slipstream_key(key: ast.AST | None) -> bool:
    """True unless ``key`` is a plain string that is not a Slipstream variable."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value.startswith(PREFIX)
    return True


def env_reads(source: str) -> list[int]:
    """Line numbers of the environment reads in ``source`` whose key is (or may be) a Slipstream variable."""
    out = []
    for node in ast.walk(ast.parse(source)):
        key, hit = None, False
        if isinstance(node, ast.Call):
            f = node.func
            getenv = (isinstance(f, ast.Attribute) and f.attr == "getenv") or (
                isinstance(f, ast.Name) and f.id == "getenv")
            method = isinstance(f, ast.Attribute) and f.attr in READS and _is_environ(f.value)
            hit, key = getenv or method, (node.args[0] if node.args else None)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            hit, key = True, node.slice
        elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
            hit, key = any(_is_environ(c) for c in node.comparators), node.left
        if hit and _slipstream_key(key):
            out.append(node.lineno)
    return sorted(out)


def spelled_names(source: str) -> list[int]:
    """Line numbers of string constants that are exactly a Slipstream variable's name."""
    return sorted(n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and n.value.startswith(PREFIX) and n.value.replace("_", "").isalnum()
            and n.value.isupper())


def _sources():
    for pkg in sorted(PACKAGES):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if f != CONFIG:
                yield f.relative_to(ROOT), f.read_text()


def test_only_the_config_module_reads_slipstream_variables():
    bad = [f"{path}:{line}" for path, text in _sources() for line in env_reads(text)]
    assert not bad, "read these through slipstream.streams.config:\n" + "\n".join(bad)


def test_each_variable_name_is_spelled_only_in_the_config_module():
    bad = [f"{path}:{line}" for path, text in _sources() for line in spelled_names(text)]
    assert not bad, "use the *_ENV constants of slipstream.streams.config:\n" + "\n".join(bad)


def test_the_check_sees_each_kind_of_read():
    src = ('import os\nfrom os import environ\n'
           'a = os.environ.get("SLIPSTREAM_X")\nb = os.getenv("SLIPSTREAM_X")\nc = os.environ["SLIPSTREAM_X"]\n'
           'd = "SLIPSTREAM_X" in os.environ\ne = environ.pop(CACHE_ENV, None)\nf = os.environ.get(config.CACHE_ENV)\n'
           'g = os.environ.get("HOME")\nh = {**os.environ, "PYTHONUNBUFFERED": "1"}\nos.environ[BOOTSTRAP_ENV] = "x"\n')
    assert env_reads(src) == [3, 4, 5, 6, 7, 8]
    assert spelled_names('x = {"SLIPSTREAM_BOOTSTRAP": 1}\ny = "set SLIPSTREAM_BOOTSTRAP first"\n') == [1]


def test_an_exported_bootstrap_is_put_back_as_it_was(monkeypatch):
    import os

    from slipstream.streams.config import BOOTSTRAP_ENV, export_bootstrap

    monkeypatch.setenv(BOOTSTRAP_ENV, "x")  # the session's value, put back at teardown
    monkeypatch.delenv(BOOTSTRAP_ENV)
    previous = export_bootstrap("127.0.0.1:19200")  # a chaos run's own broker
    assert os.environ[BOOTSTRAP_ENV] == "127.0.0.1:19200" and previous is None
    export_bootstrap(previous)
    assert BOOTSTRAP_ENV not in os.environ  # not left pointing at a broker that is gone
    assert export_bootstrap("a:1") is None and export_bootstrap("b:2") == "a:1"
    assert export_bootstrap("a:1") == "b:2" and os.environ[BOOTSTRAP_ENV] == "a:1"
