"""The GPT-1 experiment: its recipe (gpt1.recipe.recipe: every job wired to what it reads), its design
(gpt1.recipe.experiment: variants, seeds, tasks) and its preflight.

    plan = gpt1.recipe.plan(load_config("smoke"), "runs/")
"""

from gpt1.recipe.experiment import Experiment
from gpt1.recipe.recipe import plan

__all__ = ["Experiment", "plan"]
