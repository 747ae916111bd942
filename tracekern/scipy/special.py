"""tk.scipy.special: scipy.special's traced functions under SciPy's names and signatures (tracekern.numpy.special
holds them): gammaln, digamma/psi, polygamma, erf, erfc, erfinv, expit, logit, ndtr, log_ndtr, xlogy,
xlog1py, betaln, multigammaln, logsumexp, softmax, log_softmax, i0, i0e, i1, i1e."""
from ..numpy.special import (
    betaln,
    digamma,
    erf,
    erfc,
    erfinv,
    expit,
    gammaln,
    i0,
    i0e,
    i1,
    i1e,
    log_ndtr,
    log_softmax,
    logit,
    logsumexp,
    multigammaln,
    ndtr,
    polygamma,
    psi,
    softmax,
    xlog1py,
    xlogy,
)

__all__ = ["betaln", "digamma", "erf", "erfc", "erfinv", "expit", "gammaln", "i0", "i0e", "i1", "i1e", "log_ndtr",
           "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "polygamma", "psi", "softmax", "xlog1py", "xlogy"]
