"""Weights: training the serving model from recorded traffic (slime) and hot-swapping it into SGLang.

`records` picks and exports what to train on, `trainer` launches the trainer, `sglang` is the one room that talks to
the engine, `train` orders the step and publishes the weight release, `slime_replay` runs inside slime.
"""
