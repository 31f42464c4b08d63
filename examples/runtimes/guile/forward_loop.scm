;;; forward_loop.scm — the Flux-style forward loop of examples/forward_loop,
;;; in Guile Scheme, on (gcpressure) device arrays.
;;;
;;; `layers` Dense layers y = relu.(W*x .+ b); each call allocates its product
;;; W*x and the broadcast result as device arrays and the loop just drops
;;; them, as Julia code does: no frees. Guile's collector, driven by device
;;; bytes through the pressure policy, is what gives the memory back.
;;;
;;;   guile forward_loop.scm [--backend host|cuda|cuda_async|auto]
;;;     [--policy pressure|at_limit|every_iteration|cudajl|dotnet|explicit_free]
;;;     [--iters N] [--layers N] [--d N] [--batch N] [--host-heap-mib N]
;;;     [--hard-limit SIZE] [--soft-limit SIZE] [--collector callbacks|boehm]
;;;     [--incremental] [--trace FILE.csv] [--json] [--quiet]
;;;
;;; With --json the last line printed is one JSON object with the keys of
;;; examples/forward_loop (policy, backend, iterations, ooms, peak_live_bytes,
;;; peak_reserved_bytes, collections_minor, collections_full,
;;; collections_full_steady, max_pause_seconds, gc_seconds, wall_seconds,
;;; finalized) and a few of its own.

(use-modules (gcpressure)
             (ice-9 getopt-long)
             (ice-9 format))

(define option-spec
  '((backend (value #t)) (policy (value #t)) (iters (value #t)) (layers (value #t))
    (d (value #t)) (batch (value #t)) (host-heap-mib (value #t))
    (hard-limit (value #t)) (soft-limit (value #t)) (collector (value #t))
    (incremental (value #f)) (trace (value #t)) (json (value #f)) (quiet (value #f))
    (help (single-char #\h) (value #f))))

(define opts (getopt-long (command-line) option-spec))
(define (opt name default) (option-ref opts name default))
(define (opt-int name default)
  (let ((v (option-ref opts name #f)))
    (if v
        (or (string->number v) (begin (format (current-error-port) "--~a: not a number: ~a~%" name v) (exit 2)))
        default)))

(when (opt 'help #f)
  (display "usage: guile forward_loop.scm [--backend host|cuda|cuda_async|auto] [--policy NAME]
  [--iters N] [--layers N] [--d N] [--batch N] [--host-heap-mib N] [--hard-limit SIZE]
  [--soft-limit SIZE] [--collector callbacks|boehm] [--incremental] [--trace FILE.csv]
  [--json] [--quiet]\n")
  (exit 0))

(define backend (string->symbol (opt 'backend "host")))
(define policy (opt 'policy "pressure"))
(define iters (opt-int 'iters 250))
(define layers (opt-int 'layers 4))
(define d (opt-int 'd 128))
(define batch (opt-int 'batch 512))
(define host-heap-mib (opt-int 'host-heap-mib 0))
(define hard-limit (opt 'hard-limit "16MiB"))
(define soft-limit (opt 'soft-limit #f))
(define collector (string->symbol (opt 'collector "callbacks")))
(define incremental? (opt 'incremental #f))
(define trace-file (opt 'trace #f))
(define json? (opt 'json #f))
(define quiet? (opt 'quiet #f))

(define (now) (exact->inexact (/ (get-internal-real-time) internal-time-units-per-second)))
(define (mib n) (/ n 1048576.0))

(define heap (make-device-heap #:backend backend #:hard-limit hard-limit #:soft-limit soft-limit
                               #:policy policy #:collector collector #:incremental? incremental?))

;;; The simulated runtime: a live host heap of small linked objects that every
;;; (whole-heap) collection has to mark, and some host garbage per iteration.
(define host-heap
  (let loop ((n (quotient (* host-heap-mib 1048576) 96)) (acc '()))
    (if (zero? n) acc (loop (- n 1) (cons (make-vector 8 n) acc)))))
(define (host-churn i)
  (let loop ((k 0) (acc '()))
    (if (= k 300) (length acc) (loop (+ k 1) (cons (vector i k) acc)))))

;;; The model: W (d x d) and b (d) per layer, the input x (d x batch).
(define (dense-params seed)
  (let ((w (device-array heap (* d d)))
        (b (device-array heap d)))
    (device-array-fill-random! w seed (/ 1.7 (sqrt d)))
    (device-array-fill-random! b (+ seed 1000) 0.1)
    (cons w b)))
(define params (map dense-params (iota layers 1)))
(define input (device-array heap (* d batch)))
(device-array-fill-random! input 7 1.0)

;;; One Dense layer: relu.(W*x .+ b). Both arrays it allocates are dropped by
;;; the caller (the product at once, the result after the next layer). Under
;;; the explicit_free policy (the oracle: no collection ever runs) the loop
;;; frees them itself instead, as soon as they are dead.
(define explicit-free? (string=? policy "explicit_free"))
(define (dense layer x)
  (let ((wx (device-array heap (* d batch)))
        (y (device-array heap (* d batch))))
    (gemm! wx (car layer) x d d batch)
    (bias-relu! y wx (cdr layer) d batch)
    (when explicit-free? (device-array-free! wx))
    y))

(define (forward x)
  (let loop ((ls params) (x x))
    (if (null? ls)
        x
        (let ((y (dense (car ls) x)))
          (when (and explicit-free? (not (eq? x input))) (device-array-free! x))
          (loop (cdr ls) y)))))

(define (stats) (heap-stats-alist heap))
(define (blocking-full s) (json-ref s "gc" "by_kind" "blocking_full"))
(define (collections s)
  (+ (json-ref s "gc" "by_kind" "minor") (json-ref s "gc" "by_kind" "incremental_full")
     (json-ref s "gc" "by_kind" "blocking_full")))

(define trace-port
  (and trace-file
       (let ((p (open-output-file trace-file)))
         (display "iteration,live,reserved,collections,gc_seconds\n" p)
         p)))

(define ooms-seen 0)
(define steady-from (quotient (+ iters 9) 10))  ; after the first 10% of iterations
(define full-before-steady 0)
(define checksum 0.0)
(define t0 (now))

(let loop ((i 0))
  (when (< i iters)
    (when (= i steady-from) (set! full-before-steady (blocking-full (stats))))
    (catch 'gcpressure-error
      (lambda ()
        (let ((y (forward input)))
          (host-churn i)
          (when (= i (- iters 1)) (set! checksum (device-array-sum y)))
          (when explicit-free? (device-array-free! y))))
      (lambda (key who status msg)
        (if (eq? status 'oom)
            (begin
              (set! ooms-seen (+ ooms-seen 1))
              (unless quiet? (format (current-error-port) "iteration ~a: OOM: ~a~%" i msg)))
            (throw key who status msg))))
    (heap-iteration! heap)
    (when (or trace-port (not quiet?))
      (let ((s (stats)))
        (when trace-port
          (format trace-port "~a,~a,~a,~a,~a~%" i (json-ref s "requested" "current")
                  (json-ref s "reserved" "current") (collections s) (json-ref s "gc" "gc_seconds")))
        (unless quiet?
          (format #t "iteration ~4d  live ~8,2f MiB  reserved ~8,2f MiB  collections ~a~%" i
                  (mib (json-ref s "requested" "current")) (mib (json-ref s "reserved" "current"))
                  (collections s)))))
    (loop (+ i 1))))

(define wall (- (now) t0))
(when trace-port (close-port trace-port))

(define s (stats))
(define counters (gcpressure-module-counters))
(define (num x) (if (exact? x) x (let ((r (exact->inexact x))) (if (nan? r) 0 r))))
(define summary
  `(("policy" . ,(json-ref s "gc" "policy"))
    ("backend" . ,(json-ref s "backend"))
    ("iterations" . ,iters)
    ("ooms" . ,(json-ref s "ooms"))
    ("peak_live_bytes" . ,(json-ref s "requested" "peak"))
    ("peak_reserved_bytes" . ,(json-ref s "reserved" "peak"))
    ("collections_minor" . ,(json-ref s "gc" "by_kind" "minor"))
    ("collections_full" . ,(+ (json-ref s "gc" "by_kind" "incremental_full")
                              (json-ref s "gc" "by_kind" "blocking_full")))
    ("collections_full_steady" . ,(- (blocking-full s) full-before-steady))
    ("max_pause_seconds" . ,(json-ref s "gc" "longest_pause_seconds"))
    ("gc_seconds" . ,(json-ref s "gc" "gc_seconds"))
    ("wall_seconds" . ,wall)
    ("finalized" . ,(json-ref s "gc" "finalized"))
    ;; Our own: the runtime and the test's inputs.
    ("runtime" . "guile")
    ("collector" . ,(symbol->string collector))
    ("bdwgc_incremental" . ,(assq-ref counters 'gc-incremental))
    ("hard_limit_bytes" . ,(json-ref s "hard_limit"))
    ("total_allocated_bytes" . ,(json-ref s "requested" "total"))
    ("ooms_caught" . ,ooms-seen)
    ("finalized_on_guile_finalizer_thread" . ,(assq-ref counters 'finalized-on-other-threads))
    ("bdwgc_collections" . ,(bdwgc-collections))
    ("ladder_full_collections" . ,(json-ref s "ladder" "full_collection"))
    ("layers" . ,layers) ("d" . ,d) ("batch" . ,batch) ("host_heap_mib" . ,host-heap-mib)
    ("checksum" . ,(num checksum))))

(define (json-value v)
  (cond ((string? v) (format #f "~s" v))
        ((eq? v #t) "true")
        ((eq? v #f) "false")
        (else (number->string (num v)))))

(unless json?
  (format #t "~%~a on ~a, ~a iterations, hard limit ~,1f MiB: peak reserved ~,2f MiB, peak live ~,2f MiB,
  ~a minor + ~a full collections (~a blocking after warm-up), GC ~,3f s of ~,3f s, longest pause ~,2f ms, ~a OOMs~%"
          (assoc-ref summary "policy") (assoc-ref summary "backend") iters
          (mib (assoc-ref summary "hard_limit_bytes")) (mib (assoc-ref summary "peak_reserved_bytes"))
          (mib (assoc-ref summary "peak_live_bytes")) (assoc-ref summary "collections_minor")
          (assoc-ref summary "collections_full") (assoc-ref summary "collections_full_steady")
          (assoc-ref summary "gc_seconds") wall (* 1000 (assoc-ref summary "max_pause_seconds"))
          (assoc-ref summary "ooms")))
(when json?
  (format #t "{~a}~%"
          (string-join (map (lambda (p) (format #f "~s:~a" (car p) (json-value (cdr p)))) summary) ",")))
