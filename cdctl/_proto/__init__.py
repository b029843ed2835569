"""Generated from proto/ by 'make proto' (betterproto2 for grpclib). Never edited by hand."""
