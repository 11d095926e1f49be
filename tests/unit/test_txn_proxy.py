"""The commit-holding proxy of the integration tests (``tests/integration/txn_proxy.py``) tells a
committing EndTxn request from everything else, on the bytes aiokafka sends."""
from __future__ import annotations

import struct

from aiokafka.protocol.transaction import AddOffsetsToTxnRequest_v0, EndTxnRequest_v0

from tests.integration.txn_proxy import committing_end_txn


def framed(req, client_id: bytes = b"aiokafka-0.14") -> bytes:
    """A request as on the wire after its size prefix: header v1, then the body."""
    return struct.pack(">hhih", req.API_KEY, req.API_VERSION, 7, len(client_id)) + client_id + req.encode()


def test_only_a_committing_end_txn_is_caught_and_its_transactional_id_named():
    assert committing_end_txn(framed(EndTxnRequest_v0("g.topic.1", 4000, 2, True))) == "g.topic.1"
    assert committing_end_txn(framed(EndTxnRequest_v0("g.topic.1", 4000, 2, False))) is None  # an abort
    assert committing_end_txn(framed(AddOffsetsToTxnRequest_v0("g.topic.1", 4000, 2, "g"))) is None
    assert committing_end_txn(framed(EndTxnRequest_v0("g.t", 1, 0, True), client_id=b"")) == "g.t"
    assert committing_end_txn(b"\x00\x1a") is None  # too short to be a request
