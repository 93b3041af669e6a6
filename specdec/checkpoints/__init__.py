"""Load, save and export EAGLE-1 / EAGLE-3 heads in the official checkpoint formats, with strict validation.

* :mod:`~specdec.checkpoints.formats`: file names, the official EAGLE-1 / EAGLE-3 key layouts (SGLang/SpecForge and
  vLLM), the quirks of released checkpoints and the conventions servers disagree on (aux layer ids, ``rope_scaling``).
* :mod:`~specdec.checkpoints.speculators`: the speculators format (vllm-project/speculators): config translation and
  key maps, both directions.
* :mod:`~specdec.checkpoints.load`: :func:`load_eagle_head` (auto-detects the kind and layout, single-file or
  sharded weights, every key and shape validated), :func:`load_draft_vocab`, :func:`read_weights`,
  :class:`CheckpointError`.
* :mod:`~specdec.checkpoints.export`: :func:`save_eagle_head` (our round trip), :func:`export_eagle3` and
  :func:`export_speculators` (for servers: refuse what a server would misread), :func:`save_draft_vocab`.

The heads themselves are :class:`~specdec.eagle.heads.Eagle1Head` and
:class:`~specdec.eagle.heads.Eagle3Head`, configured by :class:`~specdec.eagle.config.EagleConfig`.
"""

from specdec.checkpoints.export import (
    EXPORT_LAYOUTS,
    export_eagle3,
    export_speculators,
    save_draft_vocab,
    save_eagle_head,
)
from specdec.checkpoints.formats import DRAFT_VOCAB_FILE
from specdec.checkpoints.load import CheckpointError, load_draft_vocab, load_eagle_head, read_weights

__all__ = [
    "CheckpointError",
    "DRAFT_VOCAB_FILE",
    "EXPORT_LAYOUTS",
    "load_eagle_head",
    "load_draft_vocab",
    "read_weights",
    "save_eagle_head",
    "save_draft_vocab",
    "export_eagle3",
    "export_speculators",
]
