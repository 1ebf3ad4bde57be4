"""Agent-data co-evolution (CoEvolve): GRPO whose rollouts yield weakness signals that steer an
explorer through the real environment; what it finds becomes verified training tasks.

signals.py (pure functions over stored trajectories), explore.py (reflection and goal-free
exploration through any Policy), walk.py (the random and signal-guided explorers without a
model, over the env's valid actions), synthesize.py (explorations -> candidate tasks),
verify.py (the environment confirms them), loop.py (the method's stages), summary.py (what a
round records beside its counts).
"""
