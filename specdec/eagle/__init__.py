"""The EAGLE heads as modules (EAGLE-1/HASS and EAGLE-3, the official checkpoint keys), their config, the checks of
a head against its target, and the fused inference copies: the layer below the drafters (:mod:`specdec.drafters`),
the checkpoint readers and writers (:mod:`specdec.checkpoints`) and training (:mod:`specdec.train`), so none of them
imports another to reach a head."""
