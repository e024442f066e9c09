"""Images: references, sources, the blob cache, flattening and squashfs."""
