"""`railyard review`'s pure part: preview JSON in, one Markdown comment out (no engine, no git).

preview.py parses what `pulumi preview --diff --json` printed, rules.py holds the disruption and
touched-stack rules, render.py writes the comment. railyard/commands/review.py runs the engine.
"""
