"""What the ServerApp and the ClientApps agree on: both import it, it imports neither."""
