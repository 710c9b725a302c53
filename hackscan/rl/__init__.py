"""hackscan as the reward of an RL trainer: ``verify`` and ``Verifier`` (verifier.py) run the whole
verification and return a ``Verification`` (verification.py); ``RewardPolicy`` (reward.py) turns
it into a number; trainers.py adapts both to TRL and verl.  ``hackscan.verify``,
``hackscan.Verifier``, ``hackscan.Verification`` and ``hackscan.RewardPolicy`` are these.  Nothing
here imports torch into the caller's process."""
