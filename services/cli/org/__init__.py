"""The board as an org file: the mirror `longrun board --format org` writes, the parser that
reads it back, and the operator's edits in it turned into operator commands
(`longrun board apply`). `keywords`, `parse` and `edits` are pure; `render` formats; `apply`
talks to the HTTP API."""
