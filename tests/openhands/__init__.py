"""OpenHands' own tests ported onto cowconv: the tooling (see README.md)."""
