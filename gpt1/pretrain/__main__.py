"""`python -m gpt1.pretrain ...`: one pre-training worker (gpt1.pretrain.worker), as the launchers start it."""

import sys

from gpt1.pretrain.worker import main

sys.exit(main())
