"""Tools for operators, above the facade: doctor's checks, and the output formats the command
line and the dashboard share."""
