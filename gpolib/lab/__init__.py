"""What the notebooks measure, judge and draw; `stats` holds the rules of evidence."""
