"""``import slipstream`` is the public API: every name in ``__all__`` resolves to the object of the module
that defines it, unknown names fail as any module's do, and importing the package loads none of them."""
import subprocess
import sys

import pytest

import slipstream


@pytest.mark.parametrize("name", slipstream.__all__)
def test_every_public_name_resolves(name):
    value = getattr(slipstream, name)
    assert value is not None and name in dir(slipstream)


def test_the_client_is_the_one_the_layers_use():
    from slipstream.streams.client import PipelineClient
    from slipstream.schemas import NAMES
    assert slipstream.PipelineClient is PipelineClient and slipstream.RECORD_NAMES == NAMES


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        slipstream.Nope  # noqa: B018


def test_importing_the_package_loads_no_layer():
    code = "import sys, slipstream; print(sorted(m for m in sys.modules if m.startswith(('slipstream.', 'aiokafka'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
