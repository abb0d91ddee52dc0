"""The campaign loop: asking, dispatching, recording and deciding, one owner per trial state."""
