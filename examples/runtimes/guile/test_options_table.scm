;;; test_options_table.scm — one behaviour per input, from Guile (ctest
;;; guile_options_table): every bad value of tests/bad_options.txt given to
;;; make-device-heap as its keyword (#:hard-limit, #:gc-budget, ...) must
;;; fail with the C API's message after the option's name (Note [One error
;;; per bad value], core/src/config_detail.hpp; Note [Every option of the
;;; table], guile_gcpressure.c). The expected texts are the C API's own,
;;; written at build time by examples/runtimes/bad_options_reasons.c into
;;; $GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED. Exits 1 on any failure.

(use-modules (gcpressure) (ice-9 rdelim) (ice-9 regex) (ice-9 format) (srfi srfi-1))

(define path (or (getenv "GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED")
                 (error "GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED is not set (ctest sets it)")))

;; Each line: OPTION <tab> VALUE <tab> REASON.
(define rows
  (call-with-input-file path
    (lambda (port)
      (let loop ((acc '()))
        (let ((line (read-line port)))
          (cond ((eof-object? line) (reverse! acc))
                ((string-null? line) (loop acc))
                (else
                 (let ((f (string-split line #\tab)))
                   (unless (= (length f) 3) (error "malformed line" path line))
                   (loop (cons f acc))))))))))

(define checks 0)
(define failures '())
(define (check ok what)
  (set! checks (+ checks 1))
  (unless ok (set! failures (cons what failures))))

;; The text after "invalid value for NAME: " in MSG, or why there is none.
(define (reason-in msg name)
  (let* ((key (string-append "invalid value for " name ": "))
         (at (string-contains msg key)))
    (if at
        (substring msg (+ at (string-length key)))
        (format #f "<no '~a' in: ~a>" key msg))))

;; make-device-heap with option NAME = VALUE ('host unless the row is the
;; backend's): the gcpressure-error's (STATUS MESSAGE), another error's
;; key, or #f when the value was accepted.
(define (heap-error name value)
  (let ((kw (symbol->keyword (string->symbol (string-map (lambda (c) (if (eqv? c #\_) #\- c)) name)))))
    (catch #t
      (lambda ()
        (heap-destroy! (if (string=? name "backend")
                           (make-device-heap #:backend value)
                           (make-device-heap #:backend 'host kw value)))
        #f)
      (lambda (key . args)
        (if (eq? key 'gcpressure-error) (cdr args) (list key args))))))

(check (>= (length rows) 20) (format #f "at least 20 bad values in ~a (~a)" path (length rows)))
(for-each
 (lambda (row)
   (let* ((name (first row)) (text (second row)) (reason (third row))
          (n (and (string-match "^-?[0-9]+$" text) (string->number text)))
          ;; An integer is also given as a Scheme number: the module writes
          ;; it in decimal, so the options table sees the same text.
          (forms (if n (list text n) (list text))))
     (for-each
      (lambda (v)
        (let ((what (format #f "#:~a ~s" name v))
              (e (heap-error name v)))
          (check e (string-append what ": accepted by make-device-heap"))
          (when e
            (check (eq? (car e) 'invalid) (format #f "~a: ~s" what e))
            (when (and (eq? (car e) 'invalid) (string? (cadr e)))
              (let ((got (reason-in (cadr e) name)))
                (check (string=? got reason) (format #f "~a: got '~a', the C API says '~a'" what got reason)))))))
      forms)))
 rows)

;; Every key of the table is a keyword, in Scheme's own types.
(catch #t
  (lambda ()
    (let* ((h (make-device-heap #:backend 'host #:hard-limit (* 16 1024 1024) #:soft-limit "8 MB" #:gc-budget 0.1
                                #:every-n 2 #:pool #f #:verbose #f #:async-release-threshold 0
                                #:host-capacity "1GiB" #:device 0 #:policy 'pressure))
           (s (heap-stats-alist h)))
      (check (and (= (json-ref s "hard_limit") (* 16 1024 1024)) (= (json-ref s "soft_limit") (* 8 1024 1024)))
             (format #f "limits from 16 MiB and \"8 MB\": ~a ~a" (json-ref s "hard_limit") (json-ref s "soft_limit")))
      ;; heap-set-limits! reads size strings as make-device-heap does ("50%" of the 1 GiB device).
      (heap-set-limits! h "4 MB" "50%")
      (let ((s (heap-stats-alist h)))
        (check (and (= (json-ref s "soft_limit") (* 4 1024 1024)) (= (json-ref s "hard_limit") (* 512 1024 1024)))
               (format #f "heap-set-limits! \"4 MB\" \"50%\": ~a ~a" (json-ref s "soft_limit") (json-ref s "hard_limit"))))
      (let ((e (catch 'gcpressure-error (lambda () (heap-set-limits! h #f "64 MBx") #f) (lambda (k . a) a))))
        (check (and e (eq? (cadr e) 'invalid) (string-contains (caddr e) "invalid value for size: '64 MBx' (unknown unit"))
               (format #f "heap-set-limits! #f \"64 MBx\": ~s" e)))
      (heap-destroy! h)))
  (lambda (key . args) (check #f (format #f "good values of every kind refused: ~s ~s" key args))))
(check (eq? (car (or (heap-error "hard_limt" "8MiB") '(#f))) 'invalid) "a misspelt keyword is an error")

(for-each (lambda (f) (format #t "FAIL ~a~%" f)) (reverse failures))
(format #t "~a passed, ~a failed~%" (- checks (length failures)) (length failures))
(exit (if (null? failures) 0 1))
