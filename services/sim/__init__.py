"""The simulator's adapters: running the pure core (``corral.shared.sim``) from the command line
with the runtime's own timers, and drawing its plots (matplotlib lives here, never in shared)."""
