"""The app's tabs, one small module each, and the model registry they share."""
