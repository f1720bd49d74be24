"""Mutation testing of the engine's decision points (``make mutation``): how many one-token changes to the
engine the engine tests notice, per module. See MUTATION.md for the scope, the scores and every survivor."""
