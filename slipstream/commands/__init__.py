"""One module per `slipstream` subcommand (or group); each exposes ``commands``: a list of click commands."""
