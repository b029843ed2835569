"""The simulated cluster behind `cdctl sim` and the integration tests: API server, stand-ins, fakes."""
