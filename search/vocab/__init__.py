"""The project's typed vocabulary: the enums the code branches on, and one registry per extension point."""
