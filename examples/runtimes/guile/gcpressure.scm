;;; (gcpressure) — GPU memory owned by Guile objects, with device bytes
;;; driving Guile's collector through gcpressure's pressure policy.
;;;
;;; The primitives live in libguile-gcpressure (guile_gcpressure.c), found
;;; through GUILE_EXTENSIONS_PATH / LTDL_LIBRARY_PATH or the linker's path.
;;; A device array is a Guile foreign object; when it becomes unreachable its
;;; finalizer queues the device block back to the heap's pool. See README.md.

(define-module (gcpressure)
  #:use-module (ice-9 match)
  #:export (make-device-heap
            heap-destroy!
            heap-iteration!
            heap-quiet-moment!
            heap-synchronize!
            heap-collect!
            heap-drain!
            heap-stats
            heap-stats-alist
            heap-usage
            heap-set-limits!
            device-array
            device-array?
            device-array-bytes
            device-array-length
            device-array-live?
            device-array-free!
            device-array-fill!
            device-array-fill-random!
            device-array-sum
            device-array-ref
            gemm!
            bias-relu!
            json-string->scm
            json-ref
            gcpressure-module-counters
            bdwgc-collections
            guile-own-collections
            bdwgc-setup
            gcpressure-version))

(eval-when (expand load eval)  ; at compile time too: the compiler sees the primitives
  (load-extension "libguile-gcpressure" "scm_init_gcpressure"))

(define* (make-device-heap #:key (backend (if (getenv "GCPRESSURE_BACKEND") #f 'host))
                           (collector 'callbacks) (incremental? #f)
                           #:allow-other-keys #:rest args)
  "A device heap: one allocator on BACKEND ('host, 'cuda, 'cuda_async or
'auto; 'cuda-async and 'cuda_sync are the library's aliases). Every option
of the library's table (README.md, Configuration) is a keyword, '_' spelt
'-': #:hard-limit (bytes, or a string such as \"64MiB\" or \"80%\"; #f: the
device's memory), #:soft-limit (#f: 75% of the hard limit), #:policy (a name
of the C API's gcpressure_policy_names(), e.g. \"pressure\"; #f: pressure),
#:gc-budget, #:every-n, #:pool, #:verbose, #:host-capacity, #:device, ...
A value is a string as its GCPRESSURE_* variable would hold it, a number, a
symbol or a boolean (#t/#f: 1/0; for #:hard-limit, #:soft-limit and #:policy
#f leaves it unset), parsed by the library's one parser with its message
(Note [Every option of the table], guile_gcpressure.c). An option left out
comes from the GCPRESSURE_* environment if set there (explicit options
override it); BACKEND defaults to 'host unless GCPRESSURE_BACKEND is set.
COLLECTOR is 'callbacks
(the default: device arrays are finalized foreign objects and Guile's
collector is registered as callbacks) or 'boehm (gcpressure's own GC-owned
handles; INCREMENTAL? then asks for bdwgc's incremental mode — the first
Boehm heap's choice holds for the whole process)."
  (%make-device-heap backend (table-options args) collector incremental?))

;; The keywords of ARGS that are the library's options, as an alist of
;; (NAME . TEXT): NAME with '_' for '-' (#:gc-budget -> "gc_budget"), TEXT
;; what its GCPRESSURE_* variable would hold. The module's own keywords are
;; left out; a name the table lacks reaches the library, whose message
;; lists the known ones.
(define (table-options args)
  (let loop ((a args) (acc '()))
    (match a
      (() (reverse! acc))
      (((? keyword? k) v . rest)
       (let ((name (string-map (lambda (c) (if (eqv? c #\-) #\_ c))
                               (symbol->string (keyword->symbol k)))))
         (cond ((member name '("backend" "collector" "incremental?")) (loop rest acc))
               ((and (not v) (member name '("hard_limit" "soft_limit" "policy"))) (loop rest acc))
               (else (loop rest (acons name (option-text name v) acc))))))
      (_ (scm-error 'wrong-type-arg "make-device-heap" "expected keyword arguments, got ~S"
                    (list args) (list args))))))

(define (option-text name v)
  (cond ((string? v) v)
        ((symbol? v) (symbol->string v))
        ((eq? v #t) "1")
        ((eq? v #f) "0")
        ((exact-integer? v) (number->string v))
        ((real? v) (number->string (exact->inexact v)))
        (else (scm-error 'wrong-type-arg "make-device-heap"
                         "option #:~A must be a string, a number, a symbol or a boolean, not ~S"
                         (list name v) (list v)))))

(define* (heap-collect! heap #:optional (full? #f))
  "A collection the user asked for, with its finalizers and the drain."
  (%heap-collect! heap full?))

(define* (device-array heap n #:optional (unit 'f32))
  "A device array of N float32 values (UNIT 'f32) or N bytes (UNIT 'bytes),
allocated from HEAP. Dropping it is enough: a collection finds it and its
finalizer returns the block. Raises (gcpressure-error WHO oom MESSAGE) when
the heap cannot find the memory even after collecting."
  (%device-array heap (match unit
                        ('f32 (* 4 n))
                        ('bytes n)
                        (_ (error "device-array: unit must be 'f32 or 'bytes" unit)))))

(define (device-array-length a)
  "The number of float32 values that fit in A."
  (quotient (device-array-bytes a) 4))

(define (heap-stats-alist heap)
  "heap-stats, parsed (objects become alists with string keys)."
  (json-string->scm (heap-stats heap)))

(define (gcpressure-module-counters) (%gcpressure-module-counters))
(define (bdwgc-collections) (%bdwgc-collections))
(define (guile-own-collections)
  "Guile's own collections since the module loaded, not those the policy
asked for: (COUNT WHOLE-HEAP SECONDS). Counts exact; seconds from bdwgc's
millisecond total, not exact (guile_gcpressure.c, Note [Counting Guile's own
collections]). The library gets the same through its own_collections callback."
  (%guile-own-collections))
(define (bdwgc-setup) (%bdwgc-setup))
(define gcpressure-version %gcpressure-version)

;;; A small JSON reader: enough for the library's stats (objects, arrays,
;;; strings without \u escapes beyond the BMP, numbers, true/false/null).
(define (json-string->scm str)
  (define port (open-input-string str))
  (define (skip-ws)
    (let ((c (peek-char port)))
      (when (and (char? c) (char-whitespace? c))
        (read-char port)
        (skip-ws))))
  (define (expect c)
    (let ((got (read-char port)))
      (unless (eqv? got c)
        (error "json-string->scm: expected" c 'got got))))
  (define (read-value)
    (skip-ws)
    (let ((c (peek-char port)))
      (cond
       ((eqv? c #\{) (read-char port) (read-object))
       ((eqv? c #\[) (read-char port) (read-array))
       ((eqv? c #\") (read-char port) (read-string-body))
       ((eqv? c #\t) (read-word "true") #t)
       ((eqv? c #\f) (read-word "false") #f)
       ((eqv? c #\n) (read-word "null") 'null)
       (else (read-number)))))
  (define (read-word w)
    (string-for-each expect w))
  (define (read-object)
    (skip-ws)
    (if (eqv? (peek-char port) #\})
        (begin (read-char port) '())
        (let loop ((acc '()))
          (skip-ws)
          (expect #\")
          (let ((k (read-string-body)))
            (skip-ws)
            (expect #\:)
            (let ((v (read-value)))
              (skip-ws)
              (let ((c (read-char port)))
                (cond ((eqv? c #\,) (loop (cons (cons k v) acc)))
                      ((eqv? c #\}) (reverse! (cons (cons k v) acc)))
                      (else (error "json-string->scm: bad object" c)))))))))
  (define (read-array)
    (skip-ws)
    (if (eqv? (peek-char port) #\])
        (begin (read-char port) '#())
        (let loop ((acc '()))
          (let ((v (read-value)))
            (skip-ws)
            (let ((c (read-char port)))
              (cond ((eqv? c #\,) (loop (cons v acc)))
                    ((eqv? c #\]) (list->vector (reverse! (cons v acc))))
                    (else (error "json-string->scm: bad array" c))))))))
  (define (read-string-body)
    (let loop ((acc '()))
      (let ((c (read-char port)))
        (cond
         ((eof-object? c) (error "json-string->scm: unterminated string"))
         ((eqv? c #\") (list->string (reverse! acc)))
         ((eqv? c #\\)
          (let ((e (read-char port)))
            (loop (cons (case e
                          ((#\n) #\newline) ((#\t) #\tab) ((#\r) #\return)
                          ((#\b) #\backspace) ((#\f) #\page)
                          ((#\u) (integer->char
                                  (string->number
                                   (list->string (list (read-char port) (read-char port)
                                                       (read-char port) (read-char port)))
                                   16)))
                          (else e))
                        acc))))
         (else (loop (cons c acc)))))))
  (define (read-number)
    (let loop ((acc '()))
      (let ((c (peek-char port)))
        (if (and (char? c) (or (char-numeric? c) (memv c '(#\- #\+ #\. #\e #\E))))
            (begin (read-char port) (loop (cons c acc)))
            (let ((n (string->number (list->string (reverse! acc)))))
              (or n (error "json-string->scm: bad number near" (list->string (reverse acc)))))))))
  (let ((v (read-value)))
    (skip-ws)
    (unless (eof-object? (peek-char port))
      (error "json-string->scm: trailing characters"))
    v))

(define (json-ref obj . keys)
  "Follows KEYS (strings) through nested objects; #f when one is missing."
  (let loop ((o obj) (ks keys))
    (cond ((null? ks) o)
          ((and (list? o) (assoc (car ks) o)) => (lambda (p) (loop (cdr p) (cdr ks))))
          (else #f))))
