"""The two slime types reef's replay rollout builds (field names as slime.utils.types.Sample and
slime.rollout.base_types declare them), so slime_replay runs in tests without slime, torch or Ray."""
