"""The harness a run stands on, below the methods.

- `recipe`: the run's settings (`RunConfig`); `context`: what a run's stages share (`Run`).
- `pipeline`: stages with manifests (skip what is done, resume what was cut); `records`: what
  each stage records; `lock`: one writer per run directory; `memory`: the C heap between stages.
- `processes`: the processes of one run under `accelerate launch`; `serving`: keeping a
  generation server's weights current; `console`: what a run prints; `estimate`: the time a
  run has left.
"""
