"""Drafters: propose draft distributions q for the children of tree nodes (one drafter per file).

To add a drafter, write ``specdec/drafters/<name>.py`` (see ``ngram.py`` for a worked example) and add one import
line below and its name to ``__all__``. Keep one import per line so parallel additions merge cleanly.
"""

# --- drafters: one import per line, one per file ---
from specdec.drafters.composite import CompositeDrafter
from specdec.drafters.eagle1 import EagleDrafter
from specdec.drafters.eagle3 import Eagle3Drafter
from specdec.drafters.ngram import NGramDrafter
from specdec.drafters.retrieval import RetrievalDrafter
from specdec.drafters.small_lm import SmallLMDrafter

# --- end of drafter imports (EAGLE drafters go above this line) ---

__all__ = [
    "CompositeDrafter",
    "NGramDrafter",
    "RetrievalDrafter",
    "SmallLMDrafter",
    "EagleDrafter",
    "Eagle3Drafter",
]
