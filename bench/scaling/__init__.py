"""Scale-out inputs: bundle size, trainer long-poll fan-out, predictor CPU per call, router scrape cost, stack RSS."""
