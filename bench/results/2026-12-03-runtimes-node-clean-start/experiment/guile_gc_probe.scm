(use-modules (ice-9 format))
(define (now) (get-internal-real-time))
(define (ms t) (/ (* 1000.0 t) internal-time-units-per-second))
(gc)
(define samples
  (let loop ((i 0) (acc '()))
    (if (= i 30) (reverse acc)
        (let ((t0 (now)))
          (gc)
          (loop (+ i 1) (cons (ms (- (now) t0)) acc))))))
(define sorted (sort samples <))
(format #t "heap-size ~a MiB, heap-free ~a MiB; 30 (gc): min ~,3f median ~,3f max ~,3f ms~%"
        (/ (assq-ref (gc-stats) 'heap-size) 1048576.0) (/ (assq-ref (gc-stats) 'heap-free-size) 1048576.0)
        (car sorted) (list-ref sorted 15) (list-ref sorted 29))
