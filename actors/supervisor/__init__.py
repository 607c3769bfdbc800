"""The supervisor (placements, restarts, the registry, mailbox statistics) and the actor processes it starts."""
