"""The training stages (one module each, registered in registry.py) and what they share: the recipe contract
(contract.py), model loading (models.py), devices and DeepSpeed, FIM context trimming, the training log."""
