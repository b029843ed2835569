"""cdctl controller: ComputeDomain reconcilers (one module per managed kind), leader election, status."""
