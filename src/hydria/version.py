"""hydria's version, in a module of its own: deep modules import it without going through the
package's lazy API facade (``hydria/__init__``), which would close import cycles."""

__version__ = "0.1.0"
