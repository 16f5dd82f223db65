"""rLLM's ``rllm.trainer.verl`` modules, implemented on this plugin: core's paths of the same names become these.

Each module keeps rLLM's names and behaviour where this project does the same thing, and says in
one line where it refuses what rLLM does (docs/verl.md, "rLLM's verl-backend tests").
"""
