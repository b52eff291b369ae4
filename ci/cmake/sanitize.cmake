# Sanitizer and fuzzing builds: filled in by the reliability issue.
