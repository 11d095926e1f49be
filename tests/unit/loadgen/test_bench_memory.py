import pytest

from slipstream.loadgen.bench.memory import Memory, format_rows, maps_torch, status_kib

STATUS = "Name:\tpython\nVmPeak:\t 900000 kB\nVmHWM:\t  250880 kB\nVmRSS:\t  198656 kB\nThreads:\t7\n"


def test_status_fields_in_kib():
    assert status_kib(STATUS, "VmRSS") == 198656 and status_kib(STATUS, "VmHWM") == 250880
    with pytest.raises(KeyError):
        status_kib(STATUS, "VmSwap")
    with pytest.raises(ValueError):
        status_kib("VmRSS:\t 12 MB\n", "VmRSS")


def test_torch_is_seen_only_as_its_own_library():
    onnx = ("7f00-7f01 r-xp 0 08:01 1 /venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1\n"
            "7f02-7f03 r--p 0 00:00 0 [heap]\n")
    assert not maps_torch(onnx)
    assert maps_torch(onnx + "7f04-7f05 r-xp 0 08:01 2 /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so\n")
    assert not maps_torch("7f04-7f05 r-xp 0 08:01 2 /home/u/libtorchless/libfoo.so\n")


def test_rows_are_printed_in_mib():
    text = format_rows([Memory("ONNX EfficientNet-Lite0", 194.2, 245.0, False)])
    assert text.splitlines()[1].split()[-3:] == ["194", "245", "no"]
