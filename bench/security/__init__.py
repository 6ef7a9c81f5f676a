"""Cost of the security guards: the predictor hot path, oversized bodies, a restart with the trainer down."""
